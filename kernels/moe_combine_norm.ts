/**
 * moe_combine with the next layer's input RMSNorm fused: per token,
 * `residual[t, :] += sum_j topk_weights[t, j] * y[row_of[t, j], :]`, then
 * `out[t, :] = residual[t, :] * rsqrt(mean(residual[t, :]^2) + eps) * weight`, one workgroup
 * a token. A MoE layer followed by another layer ends with it, where moe_combine and that
 * layer's rmsnorm took two dispatches (the model's GpuModelOptions.fuseCombineNorm).
 * hidden must be a multiple of 4.
 *
 * ```ts
 * const p = moeCombineNormParams(tokens, 2048, 8, 1e-6);
 * const { residual, out } = moeCombineNormRef(residual0, y, rowOf, weights, normWeight, p);
 * ```
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { MOE_NO_ROW, moeDispatchParams, moeDispatchRef, sampleRouting } from "./moe_dispatch.ts";
import { moeCombineParams, moeCombineRef } from "./moe_combine.ts";
import { rmsnormRef } from "./rmsnorm.ts";

const params = defineParams({ tokens: "u32", hidden: "u32", top_k: "u32", eps: "f32" });

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_combine_norm",
  shader: "moe_combine_norm.wgsl",
  params,
  bindings: [
    { name: "y", type: "vec4<f32>", access: "read", shape: "[tokens * top_k, hidden/4]" },
    { name: "row_of", type: "u32", access: "read", shape: "[tokens, top_k] -> row of y" },
    { name: "topk_weights", type: "f32", access: "read", shape: "[tokens, top_k]" },
    { name: "residual", type: "vec4<f32>", access: "read_write", shape: "[tokens, hidden/4]" },
    { name: "weight", type: "T", access: "read", shape: "[hidden] (the norm's)" },
    { name: "out", type: "f32", access: "read_write", shape: "[tokens, hidden]" },
  ],
  variants: [
    { name: "f32", dtype: "f32", consts: { WG: 256 } },
    { name: "f16", dtype: "f16", consts: { WG: 256 } },
  ],
  grid: (p, _v, gpu) => grid1d(p.tokens, gpu),
};

/** Validated params; throws naming the bad field. */
export function moeCombineNormParams(
  tokens: number,
  hidden: number,
  topK: number,
  eps: number,
): ParamValues<typeof params.fields> {
  moeCombineParams(tokens, hidden, topK);
  if (!(eps > 0)) throw new Error(`moe_combine_norm: eps = ${eps} must be positive`);
  return { tokens, hidden, top_k: topK, eps };
}

/** CPU reference: moeCombineRef's new residual, then rmsnormRef of it. */
export function moeCombineNormRef(
  residual: Float32Array,
  y: Float32Array,
  rowOf: Uint32Array,
  weights: Float32Array,
  normWeight: Float32Array,
  p: ParamValues<typeof params.fields>,
): { residual: Float32Array; out: Float32Array } {
  const next = moeCombineRef(residual, y, rowOf, weights, p);
  return { residual: next, out: rmsnormRef(next, normWeight, p.tokens, p.hidden, p.eps) };
}

function combineNormCase(
  tokens: number,
  hidden: number,
  experts: number,
  topK: number,
  note = "",
  dropOne = false,
): KernelCase<typeof params.fields> {
  const p = moeCombineNormParams(tokens, hidden, topK, 1e-6);
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
        weight: rng.fillUniform(new Float32Array(hidden), 0.5, 1.5),
      };
    },
    outputs: { out: tokens * hidden },
    reference: (inp) =>
      moeCombineNormRef(
        inp.residual as Float32Array,
        inp.y as Float32Array,
        inp.row_of as Uint32Array,
        inp.topk_weights as Float32Array,
        inp.weight as Float32Array,
        p,
      ),
    tolerance: () => ({ atol: 1e-5, rtol: 1e-4 }),
    bytes: (v) =>
      tokens * hidden * (12 + 4 * topK) + rows * 8 + hidden * (v.dtype === "f16" ? 2 : 4),
    flops: rows * hidden * 2 + tokens * hidden * 4,
  };
}

export const cases = [
  combineNormCase(1, 64, 8, 2),
  combineNormCase(5, 64, 8, 2),
  combineNormCase(37, 68, 8, 3, "", true),
  combineNormCase(1, 2048, 128, 8, "qwen3-30b-a3b"),
  combineNormCase(64, 2048, 128, 8, "qwen3-30b-a3b"),
  combineNormCase(1024, 2048, 128, 8, "qwen3-30b-a3b"),
  combineNormCase(1, 4096, 8, 2, "mixtral-8x7b"),
  combineNormCase(300, 4096, 8, 2, "mixtral-8x7b"),
];
