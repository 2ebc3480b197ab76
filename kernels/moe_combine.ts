/**
 * MoE combine with the residual add fused, in place on the residual stream:
 * `residual[t, :] += sum_j topk_weights[t, j] * y[row_of[t, j], :]`, where y is the down
 * GEMM's output in expert-sorted rows and row_of comes from moe_dispatch. The k terms are
 * summed in j order (no float atomics), so the result is deterministic.
 * hidden must be a multiple of 4.
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { MOE_NO_ROW, moeDispatchParams, moeDispatchRef, sampleRouting } from "./moe_dispatch.ts";

const params = defineParams({ tokens: "u32", hidden: "u32", top_k: "u32" });
const WG = 256;

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_combine",
  shader: "moe_combine.wgsl",
  params,
  bindings: [
    { name: "y", type: "vec4<f32>", access: "read", shape: "[tokens * top_k, hidden/4]" },
    { name: "row_of", type: "u32", access: "read", shape: "[tokens, top_k] -> row of y" },
    { name: "topk_weights", type: "f32", access: "read", shape: "[tokens, top_k]" },
    { name: "residual", type: "vec4<f32>", access: "read_write", shape: "[tokens, hidden/4]" },
  ],
  variants: [{ name: "f32", dtype: "f32", consts: { WG } }],
  grid: (p, _v, gpu) => grid1d(Math.ceil((p.tokens * p.hidden) / 4 / WG), gpu),
};

/** Validated params; throws naming the bad field. */
export function moeCombineParams(
  tokens: number,
  hidden: number,
  topK: number,
): ParamValues<typeof params.fields> {
  if (!Number.isInteger(hidden) || hidden < 4 || hidden % 4) {
    throw new Error(`moe_combine: hidden = ${hidden} must be a positive multiple of 4`);
  }
  if (!Number.isInteger(topK) || topK < 1) throw new Error(`moe_combine: top_k = ${topK}`);
  if (!Number.isInteger(tokens) || tokens < 0) throw new Error(`moe_combine: tokens = ${tokens}`);
  return { tokens, hidden, top_k: topK };
}

/** CPU reference: the new residual `[tokens, hidden]` (f64 sum over j, then one f32 add). */
export function moeCombineRef(
  residual: Float32Array,
  y: Float32Array,
  rowOf: Uint32Array,
  weights: Float32Array,
  p: ParamValues<typeof params.fields>,
): Float32Array {
  const { tokens, hidden, top_k: k } = p;
  const out = new Float32Array(residual.subarray(0, tokens * hidden));
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < hidden; h++) {
      let s = 0;
      for (let j = 0; j < k; j++) {
        const row = rowOf[t * k + j];
        if (row !== MOE_NO_ROW) s += weights[t * k + j] * y[row * hidden + h];
      }
      out[t * hidden + h] += s;
    }
  }
  return out;
}

function combineCase(
  tokens: number,
  hidden: number,
  experts: number,
  topK: number,
  note = "",
  dropOne = false,
): KernelCase<typeof params.fields> {
  const p = moeCombineParams(tokens, hidden, topK);
  const rows = tokens * topK;
  return {
    label: `tokens=${tokens} hidden=${hidden} E=${experts} k=${topK}${
      dropOne ? " one dropped" : ""
    } ${note}`.trim(),
    params: p,
    inputs: (rng) => {
      const ids = sampleRouting(rng, tokens, experts, topK, "spread");
      const d = moeDispatchRef(
        ids,
        moeDispatchParams({ tokens, topK, experts, gridXGateUp: 1, gridXDown: 1 }),
      );
      // A dropped assignment (expert id out of range in moe_dispatch) adds nothing.
      if (dropOne) d.rowOf[rows - 1] = MOE_NO_ROW;
      return {
        y: rng.fillNormal(new Float32Array(rows * hidden)),
        row_of: d.rowOf,
        topk_weights: rng.fillUniform(new Float32Array(rows), 0, 1),
        residual: rng.fillNormal(new Float32Array(tokens * hidden)),
      };
    },
    outputs: {},
    reference: (inp) => ({
      residual: moeCombineRef(
        inp.residual as Float32Array,
        inp.y as Float32Array,
        inp.row_of as Uint32Array,
        inp.topk_weights as Float32Array,
        p,
      ),
    }),
    tolerance: () => ({ atol: 1e-5, rtol: 1e-5 }),
    bytes: () => tokens * hidden * (8 + 4 * topK) + rows * 8,
    flops: rows * hidden * 2,
  };
}

export const cases = [
  combineCase(1, 64, 8, 2),
  combineCase(5, 64, 8, 2),
  combineCase(37, 68, 8, 3, "", true),
  combineCase(1, 2048, 128, 8, "qwen3-30b-a3b"),
  combineCase(64, 2048, 128, 8, "qwen3-30b-a3b"),
  combineCase(1024, 2048, 128, 8, "qwen3-30b-a3b"),
  combineCase(1, 4096, 8, 2, "mixtral-8x7b"),
  combineCase(1024, 4096, 8, 2, "mixtral-8x7b"),
];
