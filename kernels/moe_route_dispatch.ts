/**
 * MoE routing and dispatch of a step of few tokens in one workgroup: moe_router's softmax top-k
 * for as many tokens at once as workgroup memory holds (8 at Qwen3-30B-A3B's 128 experts), then
 * moe_dispatch's offsets, row order, work items and indirect args, from the router logits
 * `[tokens, experts]` (moe_router_logits or the router weight's GEMV). One dispatch where the
 * two kernels take two: the MoE block takes it for steps of up to MOE_ROUTE_DISPATCH_MAX_TOKENS
 * tokens that do not route in one pass (moe_router_fused), after the split router
 * (moe_router_logits). On the H200 (2026-12-01, Qwen3-30B-A3B, two runs each way in one call)
 * it took batch-1 decode steps from 5.62 to 5.45 ms of GPU at ctx 1024 and 6.35 -> 6.18 at 8192
 * (one kernel boundary a layer fewer). Ranking one token after another, as it did until
 * 2026-12-03, it cost about 2.3-3.2 µs a token a layer (batch 2-8 through it and the split
 * router against moe_router_norm and moe_dispatch: 6.86 / 8.99-9.04 / 12.23 ms a step against
 * 6.99-7.01 / 8.84-8.85 / 11.60-11.62 at 2, 4 and 8 x 1024).
 *
 * ```ts
 * const p = moeRouteDispatchParams(routerShape, dispatchShape);
 * const ref = moeRouteDispatchRef(logits, p); // ids, weights and the dispatch's outputs
 * ```
 */
import type { KernelCase } from "./case.ts";
import type { KernelSpec } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import * as router from "./moe_router.ts";
import * as dispatch from "./moe_dispatch.ts";

// the dispatch's params and the router's norm_topk
const params = defineParams({ ...dispatch.spec.params.fields, norm_topk: "u32" });

/**
 * Most tokens of a step the MoE block routes and dispatches in one workgroup by default: the
 * steps that split their router (moe_block's MOE_SPLIT_ROUTER_MAX_TOKENS, which says why 16).
 * The `f32-sg` form ranks a token a subgroup, eight at once in its 256 invocations; on the H200
 * (session 43, profile at 8 and 64 x 1024) it read 17.5 µs a call at 8 tokens and 49.2 at 64,
 * against the dispatch alone's 10.8 and 11.5 and the `f32` form's 27.3 and 134; with a lane's
 * logits held in registers between rounds (E <= 4 x sg_size) 16.2 against 17.1 at 8 tokens.
 */
export const MOE_ROUTE_DISPATCH_MAX_TOKENS = 16;
/** The most it may be asked to take (its tokens ranked 8 at a time at 128 experts). */
export const MOE_ROUTE_DISPATCH_TOKENS_LIMIT = 64;

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_route_dispatch",
  shader: "moe_route_dispatch.wgsl",
  params,
  bindings: [
    { name: "logits", type: "f32", access: "read", shape: "[tokens, experts]" },
    ...router.spec.bindings.filter((b) => b.name !== "logits"),
    ...dispatch.spec.bindings.filter((b) => b.name !== "topk_ids"),
  ],
  variants: [{
    name: "f32",
    dtype: "f32",
    // moe_dispatch's arrays (24,576 bytes) and the ranking's (ROW_LOGITS, TOP_SLOTS)
    workgroupBytes: 29184,
    consts: {
      WG: dispatch.spec.variants[0].consts!.WG,
      MAX_E: router.MOE_MAX_EXPERTS,
      // logits staged at once (8 tokens of 128 experts) and the tokens' top-k logits
      ROW_LOGITS: 1024,
      TOP_SLOTS: 128,
    },
  }, {
    // the tokens ranked one subgroup a token (lib/router_top_k_subgroups.wgsl): k rounds of two
    // subgroup reductions, where `f32` counts each pair's rank against every logit
    name: "f32-sg",
    dtype: "f32",
    shader: "moe_route_dispatch_subgroups.wgsl",
    subgroups: true,
    minSubgroupSize: 8,
    workgroupBytes: 24576,
    consts: { WG: dispatch.spec.variants[0].consts!.WG, MAX_E: router.MOE_MAX_EXPERTS },
  }],
  grid: () => [1, 1, 1],
};

/** Validated params: the router's and the dispatch's, which must agree on the step's shape. */
export function moeRouteDispatchParams(
  r: router.MoeRouterShape,
  d: dispatch.MoeDispatchShape,
): ParamValues<typeof params.fields> {
  if (r.tokens !== d.tokens || r.experts !== d.experts || r.topK !== d.topK) {
    throw new Error(
      `moe_route_dispatch: router (${r.tokens} tokens, ${r.experts} experts, k ${r.topK}) and ` +
        `dispatch (${d.tokens}, ${d.experts}, k ${d.topK}) disagree`,
    );
  }
  const rp = router.moeRouterParams(r);
  return { ...dispatch.moeDispatchParams(d), norm_topk: rp.norm_topk };
}

/** CPU reference: moe_router's, then moe_dispatch's on its ids. */
export function moeRouteDispatchRef(
  logits: Float32Array,
  p: ParamValues<typeof params.fields>,
): { ids: Int32Array; weights: Float32Array } & dispatch.MoeDispatchResult {
  const routed = router.moeRouterRef(logits, p);
  return { ...routed, ...dispatch.moeDispatchRef(routed.ids, p) };
}

function routeDispatchCase(
  tokens: number,
  experts: number,
  topK: number,
  normTopk: boolean,
  note: string,
  ties = false,
): KernelCase<typeof params.fields> {
  const blockM = dispatch.MOE_BLOCK_M;
  const p = moeRouteDispatchParams({ tokens, experts, topK, normTopk }, {
    tokens,
    topK,
    experts,
    blockM,
    gridXGateUp: 3,
    gridXDown: 5,
  });
  const n = tokens * topK;
  const maxItems = dispatch.moeMaxWorkItems(n, experts, blockM);
  return {
    label: `tokens=${tokens} E=${experts} k=${topK}${normTopk ? " norm" : ""} ${note}`.trim(),
    params: p,
    inputs: (rng) => {
      const logits = rng.fillNormal(new Float32Array(tokens * experts), 2);
      // quarter steps in a narrow range: exact ties between experts
      if (ties) { for (let i = 0; i < logits.length; i++) logits[i] = Math.round(logits[i]) / 4; }
      return { logits };
    },
    outputs: {
      topk_ids: n,
      topk_weights: n,
      ...dispatch.dispatchOutputSizes(n, experts, maxItems),
    },
    reference: (inp) => {
      const r = moeRouteDispatchRef(inp.logits as Float32Array, p);
      return { topk_ids: r.ids, topk_weights: r.weights, ...dispatch.dispatchOutputsOf(r) };
    },
    // the weights as moe_router's; the ids, rows and items exact (integers)
    tolerance: () => ({ atol: 1e-6, rtol: 1e-5 }),
    bytes: () =>
      tokens * experts * 4 + n * 8 + n * 12 + (experts + 1) * 4 + 16 * (1 + maxItems) + 24,
    flops: tokens * experts * 6,
  };
}

export const cases = [
  routeDispatchCase(1, 8, 2, true, ""),
  routeDispatchCase(3, 8, 2, false, "ties", true),
  routeDispatchCase(5, 60, 16, true, ""),
  routeDispatchCase(2, router.MOE_MAX_EXPERTS, 4, false, "512 experts"),
  routeDispatchCase(1, 128, 8, true, "qwen3-30b-a3b"),
  routeDispatchCase(4, 128, 8, true, "qwen3-30b-a3b ties", true),
  routeDispatchCase(8, 128, 8, true, "qwen3-30b-a3b, one chunk"),
  routeDispatchCase(13, 128, 8, false, "qwen3-30b-a3b, two chunks"),
  routeDispatchCase(5, router.MOE_MAX_EXPERTS, 16, true, "512 experts, three chunks", true),
  routeDispatchCase(40, 128, 8, true, "qwen3-30b-a3b, five chunks (f32-sg: 5 tokens a subgroup)"),
  routeDispatchCase(64, 8, 2, true, "mixtral-8x7b, one chunk"),
  routeDispatchCase(1, 8, 2, true, "mixtral-8x7b"),
];
