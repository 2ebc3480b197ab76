/**
 * The one-pass MoE router (moe_router_fused) with the layer's input RMSNorm fused: per token
 * `out[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * norm_weight` (the normed row the expert GEMMs
 * read), then the router logits `out[t] . w[e]` and moe_router's softmax top-k, in one
 * workgroup a token. It takes the place of the rmsnorm before the MoE block and
 * moe_router_fused (MoeBlockIo.routerNorm): one dispatch a layer fewer, the residual row read
 * once. With `splits` > 0 it first adds the o projection's split-K partial sums `o_part` to the
 * residual (in splitk_reduce's order) and writes the sum back to x: the reduce before it is
 * left out too.
 *
 * ```ts
 * const p = moeRouterNormParams({ tokens: 8, experts: 128, hidden: 2048, topK: 8,
 *   normTopk: true }, 1e-6, 4); // x owes 4 partial sums
 * // moeRouterNormRef(x, ...) adds them to x in place first when given the partials
 * const { out, logits, ids, weights } = moeRouterNormRef(x, normWeight, w, p);
 * ```
 */
import type { Gpu } from "../src/gpu/device.ts";
import type { Rng } from "../src/util/rng.ts";
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec, type Variant } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import {
  MOE_FUSED_ROUTER_VARIANTS,
  moeRouterFusedParams,
  moeRouterFusedRef,
  type MoeRouterFusedShape,
  ROUTER_FUSED_OUTPUTS,
  widestRouterVariant,
} from "./moe_router_fused.ts";
import { rmsnormRef } from "./rmsnorm.ts";

const params = defineParams({
  tokens: "u32",
  experts: "u32",
  hidden: "u32",
  top_k: "u32",
  norm_topk: "u32",
  eps: "f32",
  /** Split-K partial sums the residual still owes (0: none; o_part is then not read). */
  splits: "u32",
  /** vec4s between two partials' rows (tokens * hidden / 4). */
  split_stride: "u32",
});

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_router_norm",
  shader: "moe_router_norm.wgsl",
  params,
  bindings: [
    {
      name: "x",
      type: "vec4<f32>",
      access: "read_write",
      shape: "[tokens, hidden / 4] (residual; += the partials where splits > 0)",
    },
    {
      name: "o_part",
      type: "vec4<f32>",
      access: "read",
      shape: "[splits, tokens, hidden / 4] (split-K partials; any buffer when splits = 0)",
    },
    { name: "norm_weight", type: "vec4<T>", access: "read", shape: "[hidden / 4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[experts, hidden / 4]" },
    { name: "out", type: "vec4<f32>", access: "read_write", shape: "[tokens, hidden / 4]" },
    ...ROUTER_FUSED_OUTPUTS,
  ],
  // moe_router_fused's forms (f16 weights read as 16-byte words, 256 or 1024 invocations)
  variants: MOE_FUSED_ROUTER_VARIANTS,
  grid: (p, _v, gpu) => grid1d(p.tokens, gpu),
};

/** Validated params; throws naming the bad field. */
export function moeRouterNormParams(
  s: MoeRouterFusedShape,
  eps: number,
  splits = 0,
): ParamValues<typeof params.fields> {
  if (!(eps > 0)) throw new Error(`moe_router_norm: eps = ${eps} must be positive`);
  if (!Number.isInteger(splits) || splits < 0) {
    throw new Error(`moe_router_norm: splits = ${splits} must be a count`);
  }
  return {
    ...moeRouterFusedParams(s),
    eps,
    splits,
    split_stride: splits > 0 ? (s.tokens * s.hidden) / 4 : 0,
  };
}

/** The variant for this device: 1024 invocations a workgroup where they (and their memory) fit. */
export function moeRouterNormVariant(gpu: Gpu): Variant {
  return widestRouterVariant(gpu, spec);
}

/**
 * CPU reference: with `part` (o_part) and p.splits > 0 the partials added to x in place first (in f32,
 * splitk_reduce's order), then rmsnormRef's rows and moeRouterFusedRef over them.
 */
export function moeRouterNormRef(
  x: Float32Array,
  normWeight: Float32Array,
  w: Float32Array,
  p: ParamValues<typeof params.fields>,
  part?: Float32Array,
): { out: Float32Array; logits: Float32Array; ids: Int32Array; weights: Float32Array } {
  if (part && p.splits > 0) x.set(withPartials(x, part, p.splits, p.tokens * p.hidden));
  const out = rmsnormRef(x, normWeight, p.tokens, p.hidden, p.eps);
  return { out, ...moeRouterFusedRef(out, w, p) };
}

/** x's first `n` values plus `partials` arrays of n from `part`, added in order in f32. */
export function withPartials(
  x: Float32Array,
  part: Float32Array | undefined,
  partials: number,
  n: number,
): Float32Array {
  const v = new Float32Array(x.subarray(0, n));
  for (let s = 0; s < partials; s++) {
    for (let i = 0; i < n; i++) v[i] = Math.fround(v[i] + part![s * n + i]);
  }
  return v;
}

/**
 * The inputs of a router-norm case (moe_router_logits' too): x normal, its rows at different
 * scales (as residual rows are), the norm weight on a grid of 1/8, the router weight normal.
 */
export function routerNormCaseInputs(
  rng: Rng,
  tokens: number,
  hidden: number,
  experts: number,
): { x: Float32Array; norm_weight: Float32Array; w: Float32Array } {
  const x = rng.fillNormal(new Float32Array(tokens * hidden), 1);
  for (let t = 0; t < tokens; t++) {
    for (let i = 0; i < hidden; i++) x[t * hidden + i] *= 1 + 3 * t;
  }
  const normWeight = rng.fillUniform(new Float32Array(hidden), 0.5, 1.5);
  for (let i = 0; i < hidden; i++) normWeight[i] = Math.round(normWeight[i] * 8) / 8;
  const w = rng.fillNormal(new Float32Array(experts * hidden), 0.05);
  return { x, norm_weight: normWeight, w };
}

/**
 * A case: x normal (its rows at different scales, as residual rows are), the norm weight on a
 * grid of 1/8 and the router weight normal (both f16-rounded where stored, caseInputs); the
 * normed rows are f32 sums in another order than the reference's, so the logits match to
 * rounding and exact ties between experts are left out (normal values make them unlikely).
 */
function normCase(
  shape: MoeRouterFusedShape,
  note = "",
  splits = 0,
): KernelCase<typeof params.fields> {
  const p = moeRouterNormParams(shape, 1e-6, splits);
  const { tokens, experts, hidden, topK } = shape;
  return {
    label: `tokens=${tokens} E=${experts} H=${hidden} k=${topK}${
      shape.normTopk ? " norm_topk" : ""
    }${splits ? ` +${splits} partials` : ""} ${note}`.trim(),
    params: p,
    inputs: (rng) => {
      const inputs = routerNormCaseInputs(rng, tokens, hidden, experts);
      const part = rng.fillNormal(new Float32Array(Math.max(1, splits) * tokens * hidden), 0.5);
      return { ...inputs, o_part: part };
    },
    outputs: {
      x: tokens * hidden,
      out: tokens * hidden,
      logits: tokens * experts,
      topk_ids: tokens * topK,
      topk_weights: tokens * topK,
    },
    reference: (inp) => {
      const x = new Float32Array(inp.x as Float32Array);
      const r = moeRouterNormRef(
        x,
        inp.norm_weight as Float32Array,
        inp.w as Float32Array,
        p,
        inp.o_part as Float32Array,
      );
      return { x, out: r.out, logits: r.logits, topk_ids: r.ids, topk_weights: r.weights };
    },
    tolerance: () => ({ atol: 2e-5, rtol: 1e-4 }),
    bytes: () =>
      experts * hidden * 2 + hidden * 2 + tokens * (hidden * 8 + experts * 4) + tokens * topK * 8 +
      (splits > 0 ? tokens * hidden * 4 * (splits + 1) : 0),
    flops: tokens * (4 * hidden + experts * (2 * hidden + 6)),
  };
}

export const cases = [
  normCase({ tokens: 1, experts: 8, hidden: 64, topK: 2, normTopk: true }),
  normCase({ tokens: 5, experts: 8, hidden: 40, topK: 2, normTopk: false }, "ragged hidden"),
  normCase({ tokens: 3, experts: 300, hidden: 64, topK: 8, normTopk: true }, "two passes"),
  normCase({ tokens: 8, experts: 128, hidden: 2048, topK: 8, normTopk: true }, "qwen3-30b-a3b"),
  normCase(
    { tokens: 8, experts: 128, hidden: 2048, topK: 8, normTopk: true },
    "qwen3-30b-a3b",
    8,
  ),
  normCase({ tokens: 5, experts: 8, hidden: 40, topK: 2, normTopk: false }, "ragged hidden", 3),
  normCase({ tokens: 2, experts: 8, hidden: 4096, topK: 2, normTopk: true }, "mixtral-8x7b"),
];
