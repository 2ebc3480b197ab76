/**
 * Grouped gate/up GEMM of the MoE experts on the tensor cores (f16 16 x 16 x 16 subgroup
 * matrices, f32 sums) with the SwiGLU epilogue:
 * `act[r, c] = f16(silu(a[r] . w[e, c]) * (a[r] . w[e, inter + c]))` (clamped to f16's finite
 * range) for the rows r of each
 * work item (expert e), where `a` is the expert-sorted f16 copy of the token rows
 * (`moe_gather_f16`, 128 rows of padding, MOE_TC_PAD_ROWS) and `w` is `[experts, 2 * inter, hidden]`;
 * the prefill forms (`f16-tcp*`, readsTokenRows) read `a`'s row `sorted_token[r]` instead, so
 * there `a` may be the token rows themselves (cast_f16: no gathered copy of 8 rows a token). A
 * workgroup takes a work item's 64 rows x 32 act columns (`f16-tc`, prefill-sized steps), or
 * 16 act columns of it 16 rows at a time with the weights staged through workgroup memory from
 * 16-byte loads (`f16-tcs`, decode-sized steps: one pass over an expert's weights for 1-16
 * rows); launch indirect after moe_dispatch (grid x `inter / 32`, or `/ 16` for f16-tcs, y the
 * items) or with `spec.grid` directly. hidden must
 * be a multiple of 16, inter of 32; work items of at most 64 rows (MOE_BLOCK_M).
 */
import { fitting, type KernelCase } from "./case.ts";
import type { BindingSpec, KernelSpec, Variant } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { moeGemmGateUpRef } from "./moe_gemm_gate_up.ts";
import { moeTcRouting } from "./moe_tc_routing.ts";
import { MOE_BLOCK_M, type RoutingPattern, WORK_ITEMS_READ } from "./moe_dispatch.ts";
import { clampF16, roundToF16InPlace } from "../src/util/f16.ts";
import { expertTilesFit, tiledVariant } from "./expert_tiles.ts";

const params = defineParams({ hidden: "u32", inter: "u32", max_items: "u32" });

/**
 * The staged decode forms' (`f16-tcs`) f32 sums on their way out, a slot of 512 floats (a 16 x
 * 32 tile) a workgroup (moeTcTileFloats): through a storage buffer instead of workgroup memory,
 * since at decode shapes a workgroup's bytes of workgroup memory bound how many workgroups an SM
 * holds (README, "Writing a tensor-core kernel"). The other forms bind it and leave it alone.
 */
export const MOE_TC_TILE: BindingSpec = Object.freeze({
  name: "tile",
  type: "f32",
  access: "read_write",
  shape: "[grid x * max_items, 512] (f16-tcs: a workgroup's sums)",
});

/** Floats of a workgroup's slot of `tile`, a 16 x 32 tile (the staged forms' const SLOT). */
export const MOE_TC_SLOT_FLOATS = 512;

/** Floats of the `tile` binding a grid of `gridX` x `maxItems` workgroups takes. */
export function moeTcTileFloats(gridX: number, maxItems: number): number {
  return gridX * Math.max(1, maxItems) * MOE_TC_SLOT_FLOATS;
}

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_gemm_gate_up_tc",
  shader: "moe_gemm_gate_up_tc.wgsl",
  params,
  bindings: [
    { name: "a", type: "T", access: "read", shape: "[rows + 128, hidden] (moe_gather_f16)" },
    { name: "w", type: "T", access: "read", shape: "[experts, 2 * inter, hidden]" },
    WORK_ITEMS_READ,
    { name: "act", type: "T", access: "read_write", shape: "[rows + 128, inter]" },
    MOE_TC_TILE,
    {
      name: "sorted_token",
      type: "u32",
      access: "read",
      shape: "[rows] row -> row of a (the prefill forms, readsTokenRows; the others leave it)",
    },
  ],
  // the expert weights read_write on the wide-words forms: on the H200 (session 35, perf-decode
  // profile of 64 x 1024, two runs each way) a step's gate/up took 12.07-12.10 ms against
  // 12.56-12.57 read-only; `a` read_write as well took it to 12.68-12.70
  variants: moeTcVariants("moe_gemm_gate_up_tcs.wgsl", 16, "moe_gemm_gate_up_tcp.wgsl", 32, ["w"]),
  expertWeights: { binding: "w", rows: (p) => 2 * p.inter, cols: (p) => p.hidden },
  grid: (p, v) => [p.inter / (v.consts?.CW ?? 32), Math.max(1, p.max_items), 1],
};

/**
 * The forms of either tensor-core expert GEMM: `f16-tc` (the kernel's own shader), the staged
 * decode form `f16-tcs` (`shader`, `columns` output columns a workgroup, the f16 operands read
 * as 16-byte words) and the prefill forms `f16-tcp1/2/4` (`prefillShader`, 1, 2 or 4 subgroups
 * of `prefillColumns` output columns each, both operands staged through double-buffered
 * workgroup memory, BK of k a step, work items of 64 rows) and `f16-tcp4x2` (`f16-tcp4` with two
 * subgroups a column group, one a 64-row half of 128-row work items). The wide-words forms
 * (all but `f16-tc`) declare the `readWrite` bindings read_write (Variant.readWrite).
 */
export function moeTcVariants(
  shader: string,
  columns: number,
  prefillShader: string,
  prefillColumns: number,
  readWrite: readonly string[] = [],
): Variant[] {
  const matrix = { m: 16, n: 16, k: 16 };
  const prefill = (wn: number, bk: number, wm = 1, pf = 1): Variant => ({
    name: (wm === 1 ? `f16-tcp${wn}` : `f16-tcp${wn}x${wm}`) + (pf === 2 ? "p2" : ""),
    dtype: "f16",
    subgroupMatrix: matrix,
    perSubgroupMatrices: true,
    shader: prefillShader,
    wideWords: true,
    readWrite,
    consts: { WN: wn, WM: wm, BK: bk, CW: wn * prefillColumns, PF: pf },
  });
  const rows: Variant[] = [
    { name: "f16-tc", dtype: "f16", subgroupMatrix: matrix },
    {
      name: "f16-tcs",
      dtype: "f16",
      subgroupMatrix: matrix,
      shader,
      wideWords: true,
      readWrite,
      consts: { CW: columns, SLOT: MOE_TC_SLOT_FLOATS },
    },
    prefill(1, 32),
    prefill(2, 32),
    prefill(4, 16),
    prefill(4, 16, 2),
    prefill(4, 16, 2, 2),
  ];
  // each form again reading the expert weights in tiles (kernels/expert_tiles.ts)
  return [...rows, ...rows.map(tiledVariant)];
}

/**
 * Whether a gate/up form reads row `sorted_token[r]` of `a` for the item row r (the prefill
 * forms, moe_gemm_gate_up_tcp.wgsl) rather than row r of a gathered copy.
 */
export function readsTokenRows(variant: Variant): boolean {
  // (by the file's name: a test's emulated twin lies in a directory of its own)
  return variant.shader?.split("/").pop() === "moe_gemm_gate_up_tcp.wgsl";
}

/** The prefill forms of the tensor-core expert GEMMs (see moeTcVariants). */
export const MOE_TCP_VARIANTS = [
  "f16-tcp1",
  "f16-tcp2",
  "f16-tcp4",
  "f16-tcp4x2",
  "f16-tcp4x2p2",
] as const;

/**
 * Rows of a work item a form of the tensor-core expert GEMMs takes at most: MOE_BLOCK_M (64)
 * times its row groups WM (the prefill forms; `f16-tcp4x2`: 128), 64 for the forms without.
 * The step's dispatch makes its work items that long.
 */
export function moeTcItemRows(variant: Variant): number {
  return MOE_BLOCK_M * (variant.consts?.WM ?? 1);
}

/**
 * Whether a prefill form takes an expert shape: its output columns a workgroup divide the
 * kernel's output width (`inter` for gate/up, `hidden` for down) and its k step the reduction
 * width (the other one).
 */
export function moeTcpFits(variant: Variant, width: number, k: number): boolean {
  const cw = variant.consts?.CW ?? 0, bk = variant.consts?.BK ?? 0;
  return cw > 0 && bk > 0 && width % cw === 0 && k % bk === 0;
}

/**
 * Whether a form of either tensor-core expert GEMM takes work items of `blockM` rows and (a
 * prefill form) the kernel's output width and reduction width k (moeTcpFits).
 */
export function moeTcTakes(variant: Variant, blockM: number, width: number, k: number): boolean {
  return moeTcItemRows(variant) >= blockM &&
    (!variant.name.startsWith("f16-tcp") || moeTcpFits(variant, width, k)) &&
    (!variant.expertTiles || expertTilesFit(width, k));
}

/** Whether an expert shape fits the tensor-core expert GEMMs (gate/up and down). */
export function moeTcFits(hidden: number, inter: number): boolean {
  return hidden >= 64 && inter >= 32 && hidden % 64 === 0 && inter % 32 === 0;
}

/** Validated params of either tensor-core expert GEMM (`kernel` names it); throws naming the bad field. */
export function moeTcParams(
  kernel: string,
  hidden: number,
  inter: number,
  maxItems: number,
): { hidden: number; inter: number; max_items: number } {
  if (!moeTcFits(hidden, inter)) {
    throw new Error(
      `${kernel}: hidden = ${hidden} must be a multiple of 64 and inter = ${inter} of 32`,
    );
  }
  if (!Number.isInteger(maxItems) || maxItems < 0 || maxItems > 65535) {
    throw new Error(`${kernel}: max_items = ${maxItems} must be in 0..65535`);
  }
  return { hidden, inter, max_items: maxItems };
}

/** Validated params; throws naming the bad field. */
export function moeGemmGateUpTcParams(
  hidden: number,
  inter: number,
  maxItems: number,
): ParamValues<typeof params.fields> {
  return moeTcParams("moe_gemm_gate_up_tc", hidden, inter, maxItems);
}

function tcCase(
  tokens: number,
  experts: number,
  topK: number,
  hidden: number,
  inter: number,
  pattern: RoutingPattern,
  stored = experts,
  blockM = MOE_BLOCK_M,
  tokenRows = false,
): KernelCase<typeof params.fields> {
  const r = moeTcRouting(
    tokens,
    experts,
    topK,
    pattern,
    `hidden=${hidden} inter=${inter}`,
    stored,
    blockM,
  );
  // the gathered rows (every form; the prefill forms read them through the identity), or with
  // `tokenRows` the token rows read through the step's expert order (the prefill forms only)
  const order = tokenRows ? r.sortedToken : Uint32Array.from({ length: r.rowsPad }, (_, i) => i);
  const aRows = tokenRows ? tokens : r.rowsPad;
  return {
    label: tokenRows ? `${r.label} token rows` : r.label,
    params: moeGemmGateUpTcParams(hidden, inter, r.maxItems),
    ...fitting(
      spec.variants,
      (v) => moeTcTakes(v, blockM, inter, hidden) && (!tokenRows || readsTokenRows(v)),
    ),
    inputs: (rng) => {
      const a = new Float32Array(aRows * hidden);
      a.set(rng.fillNormal(new Float32Array((tokenRows ? tokens : r.rows) * hidden)));
      return {
        a,
        w: rng.fillUniform(
          new Float32Array(stored * 2 * inter * hidden),
          -Math.sqrt(3 / hidden),
          Math.sqrt(3 / hidden),
        ),
        work_items: r.workItems,
        sorted_token: order,
      };
    },
    outputs: { act: r.rowsPad * inter, tile: moeTcTileFloats(inter / 16, r.maxItems) },
    // a and w arrive rounded to f16; the sums are f32 and act is rounded to f16 once
    reference: (inp) => ({
      act: roundToF16InPlace(clampF16(
        moeGemmGateUpRef(
          roundToF16InPlace(new Float32Array(inp.a as Float32Array)),
          inp.w as Float32Array,
          order,
          r.workItems,
          hidden,
          inter,
        ),
      )),
    }),
    tolerance: () => ({ atol: 1e-3, rtol: 2e-3 }),
    bytes: () => r.touched * 2 * inter * hidden * 2 + r.rows * hidden * 2 + r.rows * inter * 2,
    flops: r.rows * 2 * inter * (2 * hidden + 2),
  };
}

export const cases = [
  tcCase(1, 8, 2, 64, 32, "spread"),
  tcCase(37, 8, 2, 64, 64, "skewed"),
  // three 64-column tiles a weight row: an odd number of the staged form's k steps
  tcCase(37, 8, 2, 192, 64, "skewed"),
  // full 64-row items and short ones, three act-column tiles
  tcCase(301, 4, 2, 128, 96, "skewed"),
  // Qwen3-30B-A3B's expert shape: 2048 rows over 8 stored experts (full items)
  tcCase(256, 128, 8, 2048, 768, "spread", 8),
  tcCase(256, 128, 8, 2048, 768, "spread"),
  // decode steps: 0.5 and 4 rows an expert
  tcCase(8, 128, 8, 2048, 768, "spread"),
  tcCase(64, 128, 8, 2048, 768, "spread"),
  // a prefill step of Qwen3-30B-A3B: 2048 tokens, 128 rows an expert
  tcCase(2048, 128, 8, 2048, 768, "spread"),
  // the prefill forms' own (inter 128: four subgroups' act columns): one row, short items
  // and full ones, several column blocks of the one- and two-subgroup forms
  tcCase(1, 8, 2, 64, 128, "spread"),
  tcCase(150, 4, 2, 64, 128, "skewed"),
  tcCase(37, 8, 2, 128, 128, "skewed"),
  // 128-row items (f16-tcp4x2): full and short ones, and a Qwen3-30B-A3B prefill step
  tcCase(301, 4, 2, 128, 128, "skewed", 4, 128),
  tcCase(2048, 128, 8, 2048, 768, "spread", 128, 128),
  // the prefill forms reading the token rows through the expert order (as the model runs them):
  // short and full items, a row past an item's end, and a Qwen3-30B-A3B prefill step
  tcCase(37, 8, 2, 128, 128, "skewed", 8, MOE_BLOCK_M, true),
  tcCase(301, 4, 2, 128, 128, "skewed", 4, 128, true),
  tcCase(2048, 128, 8, 2048, 768, "spread", 128, 128, true),
];
