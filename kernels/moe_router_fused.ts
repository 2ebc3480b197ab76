/**
 * MoE router in one pass, for decode-sized steps: per token the router logits
 * `x[t] . w[e]` (w the router weight `[experts, hidden]`, f32 sums) and then moe_router's
 * softmax top-k, in one workgroup a token. It takes the place of the router's GEMV and
 * moe_router, whose two dispatches cost a decode step of the H200 about 40 us a layer in the
 * profile at 64 rows (1.39 ms + 0.64 ms a step).
 *
 * ```ts
 * const p = moeRouterFusedParams({ tokens: 64, experts: 128, hidden: 2048, topK: 8,
 *   normTopk: true });
 * const { logits, ids, weights } = moeRouterFusedRef(x, w, p);
 * ```
 */
import type { Gpu } from "../src/gpu/device.ts";
import type { KernelCase } from "./case.ts";
import {
  type BindingSpec,
  grid1d,
  type KernelSpec,
  unsupportedReason,
  type Variant,
  variantByName,
} from "./kernel.ts";
import { MOE_MAX_EXPERTS, MOE_MAX_TOPK, moeRouterParams, moeRouterRef } from "./moe_router.ts";
import { defineParams, type ParamFields, type ParamValues } from "./params.ts";

const params = defineParams({
  tokens: "u32",
  experts: "u32",
  hidden: "u32",
  top_k: "u32",
  norm_topk: "u32",
});

/** Words (16 bytes, 8 f16) a lane keeps in flight. */
const UNR = 8;
/** Largest hidden size (the x row sits in workgroup memory: 4 bytes a value). */
export const MOE_FUSED_ROUTER_MAX_HIDDEN = 4096;
const consts = (wg: number) => ({
  WG: wg,
  UNR,
  MAX_E: MOE_MAX_EXPERTS,
  MAX_K: MOE_MAX_TOPK,
  MAX_H: MOE_FUSED_ROUTER_MAX_HIDDEN,
});
/** The shader's workgroup arrays: x, the logits, the top-k terms, partial sums, max and sum. */
const workgroupBytes = (wg: number) =>
  4 * (MOE_FUSED_ROUTER_MAX_HIDDEN + MOE_MAX_EXPERTS + MOE_MAX_TOPK + 3 * wg);

/**
 * f16 weights only, read as 16-byte words (`wideWords`): f32 routers keep the GEMV and
 * moe_router. 1024 invocations a workgroup: 8 of them a weight row at 128 experts, where 256
 * leave a one-token step's single workgroup 4x the words a lane to walk. (moe_router_norm
 * takes the same forms.)
 */
export const MOE_FUSED_ROUTER_VARIANTS: readonly Variant[] = [
  {
    name: "f16",
    dtype: "f16",
    wideWords: true,
    consts: consts(256),
    workgroupBytes: workgroupBytes(256),
  },
  {
    name: "f16-wg1024",
    dtype: "f16",
    wideWords: true,
    consts: consts(1024),
    workgroupBytes: workgroupBytes(1024),
  },
];

/** The one-pass router's outputs (lib/router_fused_logits.wgsl writes them; moe_router_norm's too). */
export const ROUTER_FUSED_OUTPUTS: readonly BindingSpec[] = [
  { name: "logits", type: "f32", access: "read_write", shape: "[tokens, experts]" },
  { name: "topk_ids", type: "i32", access: "read_write", shape: "[tokens, top_k]" },
  { name: "topk_weights", type: "f32", access: "read_write", shape: "[tokens, top_k]" },
];

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_router_fused",
  shader: "moe_router_fused.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[tokens, hidden / 4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[experts, hidden / 4]" },
    ...ROUTER_FUSED_OUTPUTS,
  ],
  variants: MOE_FUSED_ROUTER_VARIANTS,
  grid: (p, _v, gpu) => grid1d(p.tokens, gpu),
};

/** The fused router's shape. */
export interface MoeRouterFusedShape {
  readonly tokens: number;
  readonly experts: number;
  readonly hidden: number;
  readonly topK: number;
  readonly normTopk: boolean;
}

/** Validated params; throws naming the bad field. */
export function moeRouterFusedParams(s: MoeRouterFusedShape): ParamValues<typeof params.fields> {
  const r = moeRouterParams(s);
  if (
    !Number.isInteger(s.hidden) || s.hidden < 8 || s.hidden % 8 !== 0 ||
    s.hidden > MOE_FUSED_ROUTER_MAX_HIDDEN
  ) {
    throw new Error(
      `moe_router_fused: hidden = ${s.hidden} must be a multiple of 8 in 8..${MOE_FUSED_ROUTER_MAX_HIDDEN}`,
    );
  }
  return { ...r, hidden: s.hidden };
}

/** The variant for this device: 1024 invocations a workgroup where they (and their memory) fit. */
export function moeRouterFusedVariant(gpu: Gpu): Variant {
  return widestRouterVariant(gpu, spec);
}

/**
 * Of a kernel with MOE_FUSED_ROUTER_VARIANTS (this one, moe_router_norm), the 1024-invocation
 * form where it (and its workgroup memory) fits this device, else the 256-invocation one.
 */
export function widestRouterVariant<F extends ParamFields>(
  gpu: Gpu,
  kernel: KernelSpec<F>,
): Variant {
  const wide = variantByName(kernel, "f16-wg1024");
  return unsupportedReason(gpu, wide) === null ? wide : variantByName(kernel, "f16");
}

/**
 * CPU reference (f64 sums): the logits `[tokens, experts]`, then moeRouterRef's ids and
 * weights from them.
 */
export function moeRouterFusedRef(
  x: Float32Array,
  w: Float32Array,
  p: ParamValues<typeof params.fields>,
): { logits: Float32Array; ids: Int32Array; weights: Float32Array } {
  const { tokens, experts, hidden } = p;
  const logits = new Float32Array(tokens * experts);
  for (let t = 0; t < tokens; t++) {
    for (let e = 0; e < experts; e++) {
      let sum = 0;
      for (let i = 0; i < hidden; i++) sum += x[t * hidden + i] * w[e * hidden + i];
      logits[t * experts + e] = sum;
    }
  }
  return { logits, ...moeRouterRef(logits, p) };
}

/**
 * A case; with `grid` the inputs are multiples of 1/4 (x) and 1/8 (w) in [-1/2, 1/2]: every
 * sum is exact in f32 and f16 whatever its order, so the GPU's logits equal the reference's
 * and exact ties between experts (many, on this grid) test the tie order too.
 */
function fusedCase(
  shape: MoeRouterFusedShape,
  note: string,
  fill: "normal" | "grid" = "grid",
): KernelCase<typeof params.fields> {
  const p = moeRouterFusedParams(shape);
  const { tokens, experts, hidden, topK } = shape;
  return {
    label: `tokens=${tokens} E=${experts} H=${hidden} k=${topK}${
      shape.normTopk ? " norm" : ""
    } ${note}`.trim(),
    params: p,
    inputs: (rng) => {
      const x = rng.fillNormal(new Float32Array(tokens * hidden), 0.5);
      const w = rng.fillNormal(new Float32Array(experts * hidden), 0.05);
      if (fill === "grid") {
        for (let i = 0; i < x.length; i++) {
          x[i] = Math.max(-2, Math.min(2, Math.round(x[i] * 4))) / 4;
        }
        for (let i = 0; i < w.length; i++) {
          w[i] = Math.max(-4, Math.min(4, Math.round(w[i] * 80))) / 8;
        }
      }
      return { x, w };
    },
    outputs: { logits: tokens * experts, topk_ids: tokens * topK, topk_weights: tokens * topK },
    reference: (inp) => {
      const r = moeRouterFusedRef(inp.x as Float32Array, inp.w as Float32Array, p);
      return { logits: r.logits, topk_ids: r.ids, topk_weights: r.weights };
    },
    // grid inputs: exact logits; normal ones: f32 sums of `hidden` products in another order
    tolerance: () => fill === "grid" ? { atol: 1e-6, rtol: 1e-5 } : { atol: 2e-5, rtol: 1e-4 },
    bytes: () => experts * hidden * 2 + tokens * (hidden * 4 + experts * 4) + tokens * topK * 8,
    flops: tokens * experts * (2 * hidden + 6),
  };
}

export const cases = [
  fusedCase({ tokens: 1, experts: 8, hidden: 64, topK: 2, normTopk: true }, ""),
  fusedCase({ tokens: 5, experts: 8, hidden: 40, topK: 2, normTopk: false }, "ragged hidden"),
  fusedCase({ tokens: 7, experts: 130, hidden: 96, topK: 8, normTopk: false }, ""),
  // more experts than 256 invocations: two passes of experts on the 256-invocation form
  fusedCase({ tokens: 3, experts: 300, hidden: 64, topK: 8, normTopk: true }, "two passes"),
  fusedCase({ tokens: 3, experts: 60, hidden: 128, topK: 16, normTopk: true }, ""),
  fusedCase({ tokens: 1, experts: 128, hidden: 2048, topK: 8, normTopk: true }, "qwen3-30b-a3b"),
  fusedCase({ tokens: 9, experts: 128, hidden: 2048, topK: 8, normTopk: true }, "qwen3-30b-a3b"),
  fusedCase({ tokens: 64, experts: 128, hidden: 2048, topK: 8, normTopk: true }, "qwen3-30b-a3b"),
  fusedCase(
    { tokens: 4, experts: 128, hidden: 2048, topK: 8, normTopk: true },
    "qwen3-30b-a3b normal",
    "normal",
  ),
  fusedCase({ tokens: 2, experts: 8, hidden: 4096, topK: 2, normTopk: true }, "mixtral-8x7b"),
];
