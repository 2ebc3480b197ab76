/**
 * MoE dispatch, no host read-back: from the router's `topk_ids` it builds
 * per-expert offsets, an expert-sorted row order (row -> token and (token, j) -> row),
 * the list of (expert, row tile) work items and the indirect-dispatch args of the two
 * grouped GEMMs, all on the GPU.
 *
 * Activations are not gathered into a copy: the gate/up grouped GEMM reads token rows
 * through `sorted_token` while loading its tiles (row-granular, so the loads stay as
 * contiguous as a copy's would), which saves writing and re-reading
 * `[tokens * k, hidden]` f32 and one dispatch.
 *
 * ```ts
 * const p = moeDispatchParams({ tokens, topK, experts, blockM: 64, gridXGateUp, gridXDown });
 * const ref = moeDispatchRef(topkIds, p); // offsets, sortedToken, rowOf, workItems, args
 * ```
 */
import type { Rng } from "../src/util/rng.ts";
import type { HostArray, KernelCase } from "./case.ts";
import type { BindingSpec, KernelSpec } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { MOE_MAX_EXPERTS, MOE_MAX_TOPK } from "./moe_router.ts";

const params = defineParams({
  tokens: "u32",
  top_k: "u32",
  experts: "u32",
  block_m: "u32",
  grid_x_gate_up: "u32",
  grid_x_down: "u32",
});

/**
 * Assignments (tokens x k) a workgroup of the dispatch ranks: one workgroup up to this many, and
 * a workgroup a chunk past it, each counting every assignment itself (moe_dispatch.wgsl). One
 * workgroup took 0.49 ms a layer of a 16384-token prefill step on the H200 (512 rounds of 256).
 */
export const MOE_DISPATCH_CHUNK = 2048;

/** Rows per work item the GEMMs are launched with (each GEMM loops over larger tiles). */
export const MOE_BLOCK_M = 64;
/** `row_of` of an assignment whose expert id was out of range. */
export const MOE_NO_ROW = 0xffffffff;
/** Indirect-args offsets (bytes) in `dispatch_args`: gate/up GEMM, then down GEMM. */
export const MOE_ARGS_GATE_UP = 0;
export const MOE_ARGS_DOWN = 12;

/** Shape of the work-item table moe_dispatch writes (binding comment of every reader). */
const WORK_ITEMS_SHAPE =
  "[1 + max_items]: [0] = (items, rows, 0, 0), then (expert, row start, row end, 0)";

/** The `work_items` binding of the kernels that read moe_dispatch's table. */
export const WORK_ITEMS_READ: BindingSpec = Object.freeze({
  name: "work_items",
  type: "vec4<u32>",
  access: "read",
  shape: WORK_ITEMS_SHAPE,
});

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_dispatch",
  shader: "moe_dispatch.wgsl",
  params,
  bindings: [
    { name: "topk_ids", type: "i32", access: "read", shape: "[tokens * top_k]" },
    { name: "expert_offsets", type: "u32", access: "read_write", shape: "[experts + 1]" },
    {
      name: "sorted_token",
      type: "u32",
      access: "read_write",
      shape: "[tokens * top_k] row -> token",
    },
    { name: "row_of", type: "u32", access: "read_write", shape: "[tokens * top_k] (t, j) -> row" },
    { ...WORK_ITEMS_READ, access: "read_write" },
    {
      name: "dispatch_args",
      type: "u32",
      access: "read_write",
      shape: "[6] = (grid_x_gate_up, items, 1, grid_x_down, items, 1)",
    },
  ],
  variants: [{
    name: "f32",
    dtype: "f32",
    consts: { WG: 256, MAX_E: MOE_MAX_EXPERTS, CHUNK: MOE_DISPATCH_CHUNK },
  }],
  grid: (p) => [moeDispatchWorkgroups(p.tokens * p.top_k), 1, 1],
};

/** Workgroups of the dispatch of `n` assignments: a chunk each, at least one. */
export function moeDispatchWorkgroups(n: number): number {
  return Math.max(1, Math.ceil(n / MOE_DISPATCH_CHUNK));
}

/** The dispatch's shape. */
export interface MoeDispatchShape {
  readonly tokens: number;
  readonly topK: number;
  readonly experts: number;
  /** Rows per work item (default MOE_BLOCK_M). */
  readonly blockM?: number;
  /** Workgroups along x of the gate/up and the down grouped GEMMs (their specs' grid). */
  readonly gridXGateUp: number;
  readonly gridXDown: number;
}

/** Validated params of the dispatch; throws naming the bad field. */
export function moeDispatchParams(s: MoeDispatchShape): ParamValues<typeof params.fields> {
  const blockM = s.blockM ?? MOE_BLOCK_M;
  const check = (name: string, v: number, lo: number, hi: number) => {
    if (!Number.isInteger(v) || v < lo || v > hi) {
      throw new Error(`moe_dispatch: ${name} = ${v} must be an integer in ${lo}..${hi}`);
    }
  };
  check("experts", s.experts, 1, MOE_MAX_EXPERTS);
  check("top_k", s.topK, 1, Math.min(MOE_MAX_TOPK, s.experts));
  check("tokens", s.tokens, 0, 2 ** 31 / s.topK);
  check("block_m", blockM, 1, 2 ** 16);
  check("grid_x_gate_up", s.gridXGateUp, 1, 65535);
  check("grid_x_down", s.gridXDown, 1, 65535);
  const items = moeMaxWorkItems(s.tokens * s.topK, s.experts, blockM);
  if (items > 65535) {
    throw new Error(
      `moe_dispatch: up to ${items} work items exceed a grid dimension (65535); raise block_m`,
    );
  }
  return {
    tokens: s.tokens,
    top_k: s.topK,
    experts: s.experts,
    block_m: blockM,
    grid_x_gate_up: s.gridXGateUp,
    grid_x_down: s.gridXDown,
  };
}

/**
 * Most work items `rows` assignments can make: sum over experts of ceil(count / blockM)
 * is below rows / blockM + (experts used), so at most ceil(rows / blockM) + min(E, rows) - 1.
 */
export function moeMaxWorkItems(rows: number, experts: number, blockM: number): number {
  if (rows <= 0) return 0;
  return Math.ceil(rows / blockM) + Math.min(experts, rows) - 1;
}

/** What the dispatch writes. */
export interface MoeDispatchResult {
  /** [experts + 1] exclusive offsets; the last is the number of rows. */
  readonly expertOffsets: Uint32Array;
  /** [rows] row -> token. */
  readonly sortedToken: Uint32Array;
  /** [tokens * k] assignment -> row (MOE_NO_ROW when its expert id is out of range). */
  readonly rowOf: Uint32Array;
  /** [4 * (1 + items)]: (items, rows, 0, 0), then (expert, row start, row end, 0). */
  readonly workItems: Uint32Array;
  /** [6] indirect args of the gate/up and the down GEMM. */
  readonly dispatchArgs: Uint32Array;
}

/** The dispatch's outputs by binding name (a case's reference). */
export function dispatchOutputsOf(r: MoeDispatchResult): Record<string, Uint32Array> {
  return {
    expert_offsets: r.expertOffsets,
    sorted_token: r.sortedToken,
    row_of: r.rowOf,
    work_items: r.workItems,
    dispatch_args: r.dispatchArgs,
  };
}

/** Elements of the dispatch's outputs by binding name, for `n` assignments (a case's outputs). */
export function dispatchOutputSizes(
  n: number,
  experts: number,
  maxItems: number,
): Record<string, number> {
  return {
    expert_offsets: experts + 1,
    sorted_token: n,
    row_of: n,
    work_items: 4 * (1 + maxItems),
    dispatch_args: 6,
  };
}

/** CPU reference: a stable counting sort of the assignments by expert. */
export function moeDispatchRef(
  topkIds: Int32Array,
  p: ParamValues<typeof params.fields>,
): MoeDispatchResult {
  const n = p.tokens * p.top_k;
  const valid = (id: number) => id >= 0 && id < p.experts;
  const counts = new Uint32Array(p.experts);
  for (let i = 0; i < n; i++) if (valid(topkIds[i])) counts[topkIds[i]]++;
  const expertOffsets = new Uint32Array(p.experts + 1);
  const items: number[] = [];
  for (let e = 0; e < p.experts; e++) {
    const first = expertOffsets[e];
    expertOffsets[e + 1] = first + counts[e];
    for (let r = first; r < first + counts[e]; r += p.block_m) {
      items.push(e, r, Math.min(r + p.block_m, first + counts[e]), 0);
    }
  }
  const rows = expertOffsets[p.experts];
  const next = expertOffsets.slice(0, p.experts);
  const sortedToken = new Uint32Array(rows);
  const rowOf = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const e = topkIds[i];
    if (!valid(e)) {
      rowOf[i] = MOE_NO_ROW;
      continue;
    }
    const row = next[e]++;
    sortedToken[row] = Math.floor(i / p.top_k);
    rowOf[i] = row;
  }
  const count = items.length / 4;
  return {
    expertOffsets,
    sortedToken,
    rowOf,
    workItems: new Uint32Array([count, rows, 0, 0, ...items]),
    dispatchArgs: new Uint32Array([p.grid_x_gate_up, count, 1, p.grid_x_down, count, 1]),
  };
}

/** How the test routings spread tokens over experts. */
export type RoutingPattern = "spread" | "skewed";

/**
 * A routing for cases and tests, `[tokens, k]` expert ids, distinct within a token.
 * "spread": k experts uniformly at random. "skewed": every token's first expert is 0 (one
 * expert receives all tokens), the others come from the lower half, so the upper half of
 * the experts receives none.
 */
export function sampleRouting(
  rng: Rng,
  tokens: number,
  experts: number,
  topK: number,
  pattern: RoutingPattern,
): Int32Array {
  const ids = new Int32Array(tokens * topK);
  const pool = pattern === "skewed" ? Math.max(topK, Math.ceil(experts / 2)) : experts;
  if (pattern === "skewed" && pool > experts) {
    throw new Error(`sampleRouting: skewed needs experts >= 2 * top_k - 1`);
  }
  for (let t = 0; t < tokens; t++) {
    const chosen = new Set<number>();
    if (pattern === "skewed") chosen.add(0);
    while (chosen.size < topK) chosen.add(rng.int(0, pool));
    ids.set([...chosen], t * topK);
  }
  return ids;
}

function dispatchCase(
  tokens: number,
  experts: number,
  topK: number,
  blockM: number,
  pattern: RoutingPattern,
  note = "",
  badId = false,
): KernelCase<typeof params.fields> {
  const p = moeDispatchParams({
    tokens,
    topK,
    experts,
    blockM,
    gridXGateUp: 3,
    gridXDown: 5,
  });
  const n = tokens * topK;
  const maxItems = moeMaxWorkItems(n, experts, blockM);
  return {
    label: `tokens=${tokens} E=${experts} k=${topK} block_m=${blockM} ${pattern}${
      badId ? " bad-id" : ""
    } ${note}`.trim(),
    params: p,
    // With a bad id, row_of starts out holding an earlier layer's rows (0), not the poison
    // (0xffffffff, MOE_NO_ROW itself): the dropped assignment's MOE_NO_ROW must be written.
    inputs: (rng) => {
      const ids = sampleRouting(rng, tokens, experts, topK, pattern);
      const inputs: Record<string, HostArray> = { topk_ids: ids };
      if (badId) {
        ids[Math.floor(n / 2)] = experts + 3;
        inputs.row_of = new Uint32Array(n);
      }
      return inputs;
    },
    outputs: Object.fromEntries(
      Object.entries(dispatchOutputSizes(n, experts, maxItems)).filter(([k]) =>
        !(badId && k === "row_of")
      ),
    ),
    reference: (inp) => dispatchOutputsOf(moeDispatchRef(inp.topk_ids as Int32Array, p)),
    tolerance: () => ({ atol: 0, rtol: 0 }),
    bytes: () => n * 12 + (experts + 1) * 4 + 16 * (1 + maxItems) + 24,
    flops: 0,
  };
}

export const cases = [
  dispatchCase(1, 8, 2, 4, "spread"),
  dispatchCase(5, 8, 2, 4, "skewed"),
  dispatchCase(37, 8, 2, 4, "skewed"),
  dispatchCase(37, 8, 2, 64, "spread", "", true),
  dispatchCase(300, 8, 3, 16, "spread"),
  // the most experts: every invocation of the offsets' scan takes two
  dispatchCase(200, MOE_MAX_EXPERTS, 4, 8, "spread", "512 experts"),
  dispatchCase(1, 128, 8, MOE_BLOCK_M, "spread", "qwen3-30b-a3b"),
  dispatchCase(64, 128, 8, MOE_BLOCK_M, "spread", "qwen3-30b-a3b"),
  dispatchCase(1024, 128, 8, MOE_BLOCK_M, "spread", "qwen3-30b-a3b"),
  dispatchCase(1, 8, 2, MOE_BLOCK_M, "spread", "mixtral-8x7b"),
  dispatchCase(1024, 8, 2, MOE_BLOCK_M, "skewed", "mixtral-8x7b"),
  // several workgroups, a chunk each: a chunk boundary inside a round's expert runs, a last
  // chunk short of CHUNK, a dropped id in the second chunk, one expert taking every token's
  // first assignment across the chunks
  dispatchCase(300, 128, 8, MOE_BLOCK_M, "spread", "2 chunks"),
  dispatchCase(1100, 8, 2, 16, "skewed", "2 chunks"),
  dispatchCase(1100, 16, 4, MOE_BLOCK_M, "spread", "3 chunks", true),
  dispatchCase(2048, 128, 8, MOE_BLOCK_M, "skewed", "qwen3-30b-a3b 8 chunks"),
  dispatchCase(2048, 128, 8, MOE_BLOCK_M, "spread", "qwen3-30b-a3b 8 chunks"),
];
