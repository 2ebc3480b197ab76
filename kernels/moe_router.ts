/**
 * MoE router: per token, softmax over the router logits `[tokens, experts]` (from the
 * gemv/gemm of the router weight `[experts, hidden]`), then the top-k experts, highest
 * first (ties go to the lower expert index), with their weights. With `norm_topk` the
 * weights are renormalized over the top k (Qwen3-MoE `norm_topk_prob`; Mixtral's softmax
 * over the top-k logits is the same thing); without it they are the raw probabilities.
 *
 * ```ts
 * const p = moeRouterParams({ tokens: 5, experts: 8, topK: 2, normTopk: true });
 * const { ids, weights } = moeRouterRef(logits, p);
 * ```
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";

const params = defineParams({
  tokens: "u32",
  experts: "u32",
  top_k: "u32",
  norm_topk: "u32",
});

/** Most experts a router row may have (workgroup memory of the shader). */
export const MOE_MAX_EXPERTS = 512;
/** Largest top-k. */
export const MOE_MAX_TOPK = 16;

/** Invocations a workgroup of the subgroup form. */
const SG_WG = 256;

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_router",
  shader: "moe_router.wgsl",
  params,
  bindings: [
    { name: "logits", type: "f32", access: "read", shape: "[tokens, experts]" },
    { name: "topk_ids", type: "i32", access: "read_write", shape: "[tokens, top_k]" },
    { name: "topk_weights", type: "f32", access: "read_write", shape: "[tokens, top_k]" },
  ],
  variants: [{
    name: "f32",
    dtype: "f32",
    consts: { WG: 64, MAX_E: MOE_MAX_EXPERTS, MAX_K: MOE_MAX_TOPK },
  }, {
    // a subgroup a token (shaders/moe_router_subgroups.wgsl): k rounds of two subgroup
    // reductions, no barrier; on the H200 the `f32` form took 113 us a layer at 16384 tokens
    // (8 x 2048 prefill, session 49)
    name: "f32-sg",
    dtype: "f32",
    shader: "moe_router_subgroups.wgsl",
    subgroups: true,
    minSubgroupSize: 8,
    consts: { WG: SG_WG },
  }],
  // f32-sg: WG / 32 tokens a workgroup (smaller subgroups take more a workgroup; the
  // grid-stride loop covers the rest)
  grid: (p, v, gpu) =>
    grid1d(v.subgroups ? Math.max(1, Math.ceil(p.tokens / (SG_WG / 32))) : p.tokens, gpu),
};

/** The router's shape. */
export interface MoeRouterShape {
  readonly tokens: number;
  readonly experts: number;
  readonly topK: number;
  readonly normTopk: boolean;
}

/** Validated params of the router; throws naming the bad field. */
export function moeRouterParams(s: MoeRouterShape): ParamValues<typeof params.fields> {
  if (!Number.isInteger(s.experts) || s.experts < 1 || s.experts > MOE_MAX_EXPERTS) {
    throw new Error(`moe_router: experts = ${s.experts} must be in 1..${MOE_MAX_EXPERTS}`);
  }
  if (!Number.isInteger(s.topK) || s.topK < 1 || s.topK > Math.min(MOE_MAX_TOPK, s.experts)) {
    throw new Error(
      `moe_router: top_k = ${s.topK} must be in 1..${Math.min(MOE_MAX_TOPK, s.experts)}`,
    );
  }
  if (!Number.isInteger(s.tokens) || s.tokens < 0) {
    throw new Error(`moe_router: tokens = ${s.tokens} must be a count`);
  }
  return { tokens: s.tokens, experts: s.experts, top_k: s.topK, norm_topk: s.normTopk ? 1 : 0 };
}

/**
 * CPU reference (f64): experts ranked by logit (the order of the softmax probabilities),
 * ties to the lower index; ids `[tokens, k]`, weights `[tokens, k]`.
 */
export function moeRouterRef(
  logits: Float32Array,
  p: ParamValues<typeof params.fields>,
): { ids: Int32Array; weights: Float32Array } {
  const { tokens, experts, top_k: k } = p;
  const ids = new Int32Array(tokens * k);
  const weights = new Float32Array(tokens * k);
  const order = Array.from({ length: experts }, (_, e) => e);
  for (let t = 0; t < tokens; t++) {
    const row = logits.subarray(t * experts, (t + 1) * experts);
    let max = -Infinity;
    for (let e = 0; e < experts; e++) max = Math.max(max, row[e]);
    let total = 0;
    for (let e = 0; e < experts; e++) total += Math.exp(row[e] - max);
    order.sort((a, b) => row[b] - row[a] || a - b);
    let topSum = 0;
    for (let j = 0; j < k; j++) topSum += Math.exp(row[order[j]] - max);
    const denom = p.norm_topk ? topSum : total;
    for (let j = 0; j < k; j++) {
      ids[t * k + j] = order[j];
      weights[t * k + j] = Math.exp(row[order[j]] - max) / denom;
    }
  }
  return { ids, weights };
}

function routerCase(
  shape: MoeRouterShape,
  note: string,
  fill: "normal" | "ties" = "normal",
): KernelCase<typeof params.fields> {
  const p = moeRouterParams(shape);
  const n = shape.tokens * shape.experts;
  return {
    label: `tokens=${shape.tokens} E=${shape.experts} k=${shape.topK}${
      shape.normTopk ? " norm" : ""
    } ${note}`.trim(),
    params: p,
    inputs: (rng) => {
      const logits = rng.fillNormal(new Float32Array(n), 2);
      // Quarter steps in a narrow range: many exact ties between experts.
      if (fill === "ties") { for (let i = 0; i < n; i++) logits[i] = Math.round(logits[i]) / 4; }
      return { logits };
    },
    outputs: { topk_ids: shape.tokens * shape.topK, topk_weights: shape.tokens * shape.topK },
    reference: (inp) => {
      const r = moeRouterRef(inp.logits as Float32Array, p);
      return { topk_ids: r.ids, topk_weights: r.weights };
    },
    tolerance: () => ({ atol: 1e-6, rtol: 1e-5 }),
    bytes: () => n * 4 + shape.tokens * shape.topK * 8,
    flops: n * 6,
  };
}

export const cases = [
  routerCase({ tokens: 1, experts: 8, topK: 2, normTopk: true }, ""),
  routerCase({ tokens: 5, experts: 8, topK: 2, normTopk: false }, ""),
  routerCase({ tokens: 37, experts: 8, topK: 2, normTopk: true }, "ties", "ties"),
  routerCase({ tokens: 7, experts: 130, topK: 8, normTopk: false }, "ties", "ties"),
  routerCase({ tokens: 3, experts: 60, topK: 16, normTopk: true }, ""),
  routerCase({ tokens: 1, experts: 128, topK: 8, normTopk: true }, "qwen3-30b-a3b"),
  routerCase({ tokens: 64, experts: 128, topK: 8, normTopk: true }, "qwen3-30b-a3b"),
  routerCase({ tokens: 1024, experts: 128, topK: 8, normTopk: false }, "qwen3-30b-a3b"),
  routerCase({ tokens: 1, experts: 8, topK: 2, normTopk: true }, "mixtral-8x7b"),
  routerCase({ tokens: 1024, experts: 8, topK: 2, normTopk: true }, "mixtral-8x7b"),
];
