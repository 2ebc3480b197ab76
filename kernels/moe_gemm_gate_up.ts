/**
 * Grouped gate/up GEMM of the MoE experts over (expert, row tile) work items, with the
 * SwiGLU fused into its epilogue:
 * `act[r, c] = silu(x[tok(r)] . w[e, c]) * (x[tok(r)] . w[e, inter + c])` for each row r
 * of a work item of expert e, where `w` is `[experts, 2 * inter, hidden]` (each expert's
 * gate rows, then its up rows), rows are in the expert-sorted order of moe_dispatch and
 * `tok(r) = sorted_token[r]` gathers the token's activations on the fly.
 *
 * Launch with `dispatchWorkgroupsIndirect(dispatch_args, MOE_ARGS_GATE_UP)` after
 * moe_dispatch (grid x from `spec.grid`, y = work items); a direct launch of `spec.grid`
 * (y = max_items) is equivalent: surplus workgroups return.
 * Variants: f32 / f16 tiled through workgroup memory (any rows; a workgroup of 128
 * invocations takes 64 rows x 64 act columns, i.e. 128 weight rows, 8 x 8 products each),
 * f16-sg decode-shaped (few rows per expert, weights streamed once with vec4 loads),
 * f16/f32-staged. A tensor-core form was tried and removed: on the H200 (2026-11-30) it
 * took 1.9 ms for one Qwen3-30B-A3B token and never returned for 64.
 * hidden and inter must be multiples of 4.
 */
import { expertTilesFit, tiledVariant } from "./expert_tiles.ts";
import { fitting, type KernelCase } from "./case.ts";
import type { KernelSpec, Variant } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import {
  MOE_BLOCK_M,
  moeDispatchParams,
  moeDispatchRef,
  moeMaxWorkItems,
  type RoutingPattern,
  sampleRouting,
  WORK_ITEMS_READ,
} from "./moe_dispatch.ts";
import {
  MOE_PRODUCTION_VARIANTS as PRODUCTION,
  moeColumnsPerWorkgroup,
  moeDecodeVariants,
} from "./moe_decode_variants.ts";
import { wideWordsFit } from "./lane_group_variants.ts";
import { Rng } from "../src/util/rng.ts";

const params = defineParams({ hidden: "u32", inter: "u32", max_items: "u32" });

/** Decode-shaped staged form: 32 columns a workgroup, 8 invocations a column, 16 rows staged. */
const STAGED = { WG: 256, RPW: 32, KP: 8, RMAX: 16, KC: 256 } as const;

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_gemm_gate_up",
  shader: "moe_gemm_gate_up.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[tokens, hidden/4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[experts, 2 * inter, hidden/4]" },
    { name: "sorted_token", type: "u32", access: "read", shape: "[rows] row -> token" },
    WORK_ITEMS_READ,
    { name: "act", type: "f32", access: "read_write", shape: "[rows, inter]" },
  ],
  expertWeights: { binding: "w", rows: (p) => 2 * p.inter, cols: (p) => p.hidden },
  variants: [
    { name: "f32", dtype: "f32" },
    { name: "f16", dtype: "f16" },
    // the generic form reading the expert weights in tiles (kernels/expert_tiles.ts)
    tiledVariant({ name: "f16", dtype: "f16" }),
    {
      name: "f16-sg",
      dtype: "f16",
      subgroups: true,
      // lid / sg_size picks its subgroup's slot: runs of consecutive invocations
      minSubgroupSize: 1,
      shader: "moe_gemm_gate_up_subgroup.wgsl",
      consts: { WG: 128, RPW: 2, MT: 4 },
    },
    {
      // Rows staged in workgroup memory, weights streamed once, no subgroup operations.
      name: "f16-staged",
      dtype: "f16",
      shader: "moe_gemm_gate_up_staged.wgsl",
      consts: STAGED,
    },
    { name: "f32-staged", dtype: "f32", shader: "moe_gemm_gate_up_staged.wgsl", consts: STAGED },
    // The f16-sg and f16-staged forms with w read as 32-bit words (see `packed`).
    {
      name: "f16-sg-packed",
      dtype: "f16",
      subgroups: true,
      // lid / sg_size picks its subgroup's slot: runs of consecutive invocations
      minSubgroupSize: 1,
      packed: true,
      shader: "moe_gemm_gate_up_subgroup.wgsl",
      consts: { WG: 128, RPW: 2, MT: 4 },
    },
    {
      name: "f16-staged-packed",
      dtype: "f16",
      packed: true,
      shader: "moe_gemm_gate_up_staged.wgsl",
      consts: STAGED,
    },
    ...moeDecodeVariants("moe_gemm_gate_up_decode.wgsl"),
  ],
  // act columns a workgroup owns: see moeColumnsPerWorkgroup (the tiled form: 64)
  grid: (p, v) => [Math.ceil(p.inter / moeColumnsPerWorkgroup(v, 64)), Math.max(1, p.max_items), 1],
};

/** Validated params; throws naming the bad field. */
export function moeGemmGateUpParams(
  hidden: number,
  inter: number,
  maxItems: number,
): ParamValues<typeof params.fields> {
  for (const [name, v] of [["hidden", hidden], ["inter", inter]] as const) {
    if (!Number.isInteger(v) || v < 4 || v % 4) {
      throw new Error(`moe_gemm_gate_up: ${name} = ${v} must be a positive multiple of 4`);
    }
  }
  if (!Number.isInteger(maxItems) || maxItems < 0 || maxItems > 65535) {
    throw new Error(`moe_gemm_gate_up: max_items = ${maxItems} must be in 0..65535`);
  }
  return { hidden, inter, max_items: maxItems };
}

/**
 * CPU reference (f64 dot products): act `[rows, inter]` for every row of every work item
 * (`workItems` as moe_dispatch writes it).
 */
export function moeGemmGateUpRef(
  x: Float32Array,
  w: Float32Array,
  sortedToken: Uint32Array,
  workItems: Uint32Array,
  hidden: number,
  inter: number,
): Float32Array {
  const rows = workItems[1];
  const act = new Float32Array(rows * inter);
  for (let it = 0; it < workItems[0]; it++) {
    const [e, start, end] = workItems.subarray(4 + 4 * it, 7 + 4 * it);
    for (let r = start; r < end; r++) {
      const xo = sortedToken[r] * hidden;
      for (let c = 0; c < inter; c++) {
        const go = (e * 2 * inter + c) * hidden, uo = go + inter * hidden;
        let g = 0, u = 0;
        for (let q = 0; q < hidden; q++) {
          g += x[xo + q] * w[go + q];
          u += x[xo + q] * w[uo + q];
        }
        act[r * inter + c] = (g / (1 + Math.exp(-g))) * u;
      }
    }
  }
  return act;
}

/** Number of distinct experts named by a dispatch's work items. */
export function expertsTouched(workItems: Uint32Array): number {
  const seen = new Set<number>();
  for (let it = 0; it < workItems[0]; it++) seen.add(workItems[4 + 4 * it]);
  return seen.size;
}

function gateUpCase(
  tokens: number,
  experts: number,
  topK: number,
  hidden: number,
  inter: number,
  pattern: RoutingPattern,
  note = "",
  variants?: readonly string[],
  blockM = MOE_BLOCK_M,
  stored = experts,
): KernelCase<typeof params.fields> {
  const label =
    `tokens=${tokens} E=${experts} k=${topK} hidden=${hidden} inter=${inter} ${pattern}${
      blockM === MOE_BLOCK_M ? "" : ` block_m=${blockM}`
    }${stored === experts ? "" : ` experts 0..${stored - 1} stored`} ${note}`.trim();
  // Big cases may route to (and store the weights of) the first `stored` experts only:
  // the kernel reads the touched experts alone, and the host-side f16 conversion of
  // unused experts would dominate validation time.
  const ids = sampleRouting(Rng.fromSeed(`routing/${label}`), tokens, stored, topK, pattern);
  const dispatch = moeDispatchRef(
    ids,
    moeDispatchParams({ tokens, topK, experts, blockM, gridXGateUp: 1, gridXDown: 1 }),
  );
  const rows = tokens * topK;
  const maxItems = moeMaxWorkItems(rows, experts, blockM);
  const touched = expertsTouched(dispatch.workItems);
  const memo = new Map<string, Float32Array>();
  return {
    label,
    params: moeGemmGateUpParams(hidden, inter, maxItems),
    inputs: (rng) => ({
      x: rng.fillNormal(new Float32Array(tokens * hidden)),
      w: rng.fillUniform(
        new Float32Array(stored * 2 * inter * hidden),
        -Math.sqrt(3 / hidden),
        Math.sqrt(3 / hidden),
      ),
      sorted_token: dispatch.sortedToken,
      work_items: dispatch.workItems,
    }),
    outputs: { act: rows * inter },
    reference: (inp, v) => {
      // f16 variants share one reference (same rounded weights); the tensor-core variant's
      // f16 rounding of x is covered by its tolerance.
      let act = memo.get(v.dtype);
      if (!act) {
        act = moeGemmGateUpRef(
          inp.x as Float32Array,
          inp.w as Float32Array,
          dispatch.sortedToken,
          dispatch.workItems,
          hidden,
          inter,
        );
        memo.set(v.dtype, act);
      }
      return { act };
    },
    tolerance: (v: Variant) =>
      v.subgroupMatrix ? { atol: 5e-3, rtol: 5e-3 } : { atol: 2e-4, rtol: 2e-4 },
    bytes: (v) =>
      touched * 2 * inter * hidden * (v.dtype === "f16" ? 2 : 4) + rows * hidden * 4 +
      rows * inter * 4 + rows * 4,
    flops: rows * 2 * inter * (2 * hidden + 2),
    // the tiled forms only where the weights are whole tiles, the up rows starting a band
    ...(variants ? { variants } : fitting(
      spec.variants,
      (v) => (!v.expertTiles || expertTilesFit(inter, hidden)) && wideWordsFit(v, hidden),
    )),
  };
}

export const cases = [
  gateUpCase(1, 8, 2, 64, 32, "spread"),
  gateUpCase(5, 8, 2, 64, 32, "skewed"),
  gateUpCase(37, 8, 2, 64, 36, "skewed"),
  gateUpCase(70, 4, 2, 20, 12, "skewed"),
  gateUpCase(75, 6, 2, 16, 8, "skewed", "", undefined, 150),
  // Two act-column tiles, the second partial; hidden not a multiple of 16.
  gateUpCase(41, 4, 2, 36, 68, "skewed"),
  // hidden / 4 = 66: the decode forms' unrolled loop (1-4 times by form), then their one-step tail.
  gateUpCase(9, 8, 2, 264, 40, "skewed"),
  // whole tiles of 16 rows x 64 columns (the decode forms' tiled twins), with the unrolled
  // loop's tail (hidden / 4 = 48)
  gateUpCase(9, 8, 2, 192, 64, "skewed"),
  gateUpCase(1, 128, 8, 2048, 768, "spread", "qwen3-30b-a3b", PRODUCTION),
  gateUpCase(64, 128, 8, 2048, 768, "spread", "qwen3-30b-a3b", PRODUCTION),
  gateUpCase(1024, 128, 8, 2048, 768, "spread", "qwen3-30b-a3b", ["f16"]),
  gateUpCase(1, 8, 2, 4096, 14336, "spread", "mixtral-8x7b", PRODUCTION, MOE_BLOCK_M, 3),
  gateUpCase(16, 8, 2, 4096, 14336, "spread", "mixtral-8x7b", PRODUCTION, MOE_BLOCK_M, 3),
];
