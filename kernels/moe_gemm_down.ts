/**
 * Grouped down GEMM of the MoE experts over (expert, row tile) work items:
 * `y[r, n] = act[r, :] . w[e, n, :]` for each row r of a work item of expert e, where
 * `w` is `[experts, hidden, inter]` and act comes from moe_gemm_gate_up in the same
 * expert-sorted row order (so no gather here); moe_combine scatters y back to tokens.
 *
 * Launch with `dispatchWorkgroupsIndirect(dispatch_args, MOE_ARGS_DOWN)` after
 * moe_dispatch (grid x from `spec.grid`, y = work items); a direct launch of `spec.grid`
 * (y = max_items) is equivalent: surplus workgroups return.
 * Variants as moe_gemm_gate_up: f32 / f16 tiled (64 rows x 128 columns a workgroup of 128
 * invocations, 8 x 8 outputs each), f16-sg decode-shaped, f16/f32-staged
 * (its tensor-core form was removed with gate/up's). hidden and inter must be multiples of 4.
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
import { expertsTouched } from "./moe_gemm_gate_up.ts";
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
  name: "moe_gemm_down",
  shader: "moe_gemm_down.wgsl",
  params,
  bindings: [
    { name: "act", type: "vec4<f32>", access: "read", shape: "[rows, inter/4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[experts, hidden, inter/4]" },
    WORK_ITEMS_READ,
    { name: "y", type: "f32", access: "read_write", shape: "[rows, hidden]" },
  ],
  expertWeights: { binding: "w", rows: (p) => p.hidden, cols: (p) => p.inter },
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
      shader: "moe_gemm_down_subgroup.wgsl",
      consts: { WG: 128, RPW: 2, MT: 4 },
    },
    {
      // Rows staged in workgroup memory, weights streamed once, no subgroup operations.
      name: "f16-staged",
      dtype: "f16",
      shader: "moe_gemm_down_staged.wgsl",
      consts: STAGED,
    },
    { name: "f32-staged", dtype: "f32", shader: "moe_gemm_down_staged.wgsl", consts: STAGED },
    // The f16-sg and f16-staged forms with w read as 32-bit words (see `packed`).
    {
      name: "f16-sg-packed",
      dtype: "f16",
      subgroups: true,
      // lid / sg_size picks its subgroup's slot: runs of consecutive invocations
      minSubgroupSize: 1,
      packed: true,
      shader: "moe_gemm_down_subgroup.wgsl",
      consts: { WG: 128, RPW: 2, MT: 4 },
    },
    {
      name: "f16-staged-packed",
      dtype: "f16",
      packed: true,
      shader: "moe_gemm_down_staged.wgsl",
      consts: STAGED,
    },
    ...moeDecodeVariants("moe_gemm_down_decode.wgsl"),
  ],
  // columns a workgroup owns: see moeColumnsPerWorkgroup (the tiled form: 128)
  grid: (
    p,
    v,
  ) => [Math.ceil(p.hidden / moeColumnsPerWorkgroup(v, 128)), Math.max(1, p.max_items), 1],
};

/** Validated params; throws naming the bad field. */
export function moeGemmDownParams(
  hidden: number,
  inter: number,
  maxItems: number,
): ParamValues<typeof params.fields> {
  for (const [name, v] of [["hidden", hidden], ["inter", inter]] as const) {
    if (!Number.isInteger(v) || v < 4 || v % 4) {
      throw new Error(`moe_gemm_down: ${name} = ${v} must be a positive multiple of 4`);
    }
  }
  if (!Number.isInteger(maxItems) || maxItems < 0 || maxItems > 65535) {
    throw new Error(`moe_gemm_down: max_items = ${maxItems} must be in 0..65535`);
  }
  return { hidden, inter, max_items: maxItems };
}

/** CPU reference (f64 dot products): y `[rows, hidden]` for every row of every work item. */
export function moeGemmDownRef(
  act: Float32Array,
  w: Float32Array,
  workItems: Uint32Array,
  hidden: number,
  inter: number,
): Float32Array {
  const rows = workItems[1];
  const y = new Float32Array(rows * hidden);
  for (let it = 0; it < workItems[0]; it++) {
    const [e, start, end] = workItems.subarray(4 + 4 * it, 7 + 4 * it);
    for (let r = start; r < end; r++) {
      const ao = r * inter;
      for (let n = 0; n < hidden; n++) {
        const wo = (e * hidden + n) * inter;
        let s = 0;
        for (let q = 0; q < inter; q++) s += act[ao + q] * w[wo + q];
        y[r * hidden + n] = s;
      }
    }
  }
  return y;
}

function downCase(
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
    params: moeGemmDownParams(hidden, inter, maxItems),
    inputs: (rng) => ({
      act: rng.fillNormal(new Float32Array(rows * inter)),
      w: rng.fillUniform(
        new Float32Array(stored * hidden * inter),
        -Math.sqrt(3 / inter),
        Math.sqrt(3 / inter),
      ),
      work_items: dispatch.workItems,
    }),
    outputs: { y: rows * hidden },
    reference: (inp, v) => {
      let y = memo.get(v.dtype);
      if (!y) {
        y = moeGemmDownRef(
          inp.act as Float32Array,
          inp.w as Float32Array,
          dispatch.workItems,
          hidden,
          inter,
        );
        memo.set(v.dtype, y);
      }
      return { y };
    },
    tolerance: (v: Variant) =>
      v.subgroupMatrix ? { atol: 5e-3, rtol: 5e-3 } : { atol: 2e-4, rtol: 2e-4 },
    bytes: (v) =>
      touched * hidden * inter * (v.dtype === "f16" ? 2 : 4) + rows * inter * 4 +
      rows * hidden * 4,
    flops: rows * 2 * hidden * inter,
    // the tiled forms only where the weights are whole tiles
    ...(variants ? { variants } : fitting(
      spec.variants,
      (v) => (!v.expertTiles || expertTilesFit(hidden, inter)) && wideWordsFit(v, inter),
    )),
  };
}

export const cases = [
  downCase(1, 8, 2, 64, 32, "spread"),
  downCase(5, 8, 2, 64, 32, "skewed"),
  downCase(37, 8, 2, 68, 36, "skewed"),
  downCase(70, 4, 2, 20, 12, "skewed"),
  downCase(75, 6, 2, 16, 8, "skewed", "", undefined, 150),
  // Two column tiles, the second partial; inter not a multiple of 16.
  downCase(41, 4, 2, 132, 20, "skewed"),
  // inter / 4 = 66: the decode forms' unrolled loop (1-4 times by form), then their one-step tail.
  downCase(9, 8, 2, 36, 264, "skewed"),
  // whole tiles of 16 rows x 64 columns (the decode forms' tiled twins), with the unrolled
  // loop's tail (inter / 4 = 48)
  downCase(9, 8, 2, 64, 192, "skewed"),
  downCase(1, 128, 8, 2048, 768, "spread", "qwen3-30b-a3b", PRODUCTION),
  downCase(64, 128, 8, 2048, 768, "spread", "qwen3-30b-a3b", PRODUCTION),
  downCase(1024, 128, 8, 2048, 768, "spread", "qwen3-30b-a3b", ["f16"]),
  downCase(1, 8, 2, 4096, 14336, "spread", "mixtral-8x7b", PRODUCTION, MOE_BLOCK_M, 3),
  downCase(16, 8, 2, 4096, 14336, "spread", "mixtral-8x7b", PRODUCTION, MOE_BLOCK_M, 3),
];
