/**
 * The MoE router's logits spread over the GPU, with the layer's input RMSNorm fused: per token
 * `out[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * norm_weight` (the normed row the expert GEMMs
 * read) and `logits[t, e] = out[t] . w[e]`, over a grid of (groups of EG = 4 experts) x
 * tokens, 32 invocations each (expert, token) pair; moe_route_dispatch (batch 1) or moe_router
 * ranks the logits after it. Where moe_router_norm gives each token one workgroup that reads
 * the whole router weight (512 KB at Qwen3-30B-A3B), here each workgroup reads 4 weight rows.
 *
 * On the H200 (2026-12-02, decode GPU ms at ctx 1024, against rmsnorm, the router's GEMV and
 * moe_route_dispatch at batch 1 and moe_router_norm from 2 tokens): batch 1 5.25 -> 5.02,
 * 1 x 8192 5.51 -> 5.36, but batch 8 11.92 -> 12.02, 32 23.12 -> 24.15, 64 28.35 -> 30.11 and
 * 128 33.32 -> 36.78: past one token each workgroup reads its tokens' rows again for each of
 * its 8 experts (moe_router_logits alone 47.7 us a layer in the 64 x 1024 profile, against
 * moe_router_norm's 24.8), and forms of 2 and 4 tokens a workgroup (512 and 1024 invocations)
 * were no faster. So the model takes it at batch 1 (MoeBlockOptions.splitRouterMaxTokens).
 *
 * 4 experts a workgroup (32 workgroups of 128 invocations at Qwen3-30B-A3B) rather than 8: on
 * the H200 (2026-12-03, perf-decode at batch 1, two processes each, the forms in turn) 1 x 1024
 * 4.41 / 4.44 ms against 4.47 / 4.47 with 8, 1 x 8192 4.70 / 4.70 against 4.79 / 4.75; 2 experts
 * read 4.45-4.46 and 4.72-4.73, 1 expert 4.48 and 4.76 (its one subgroup writes the normed row
 * alone).
 *
 * Where subgroups hold its lane groups the model takes the one-pass form (`f16-w32` on the H200,
 * moe_router_logits_lanes.wgsl): each lane group sums the row's squares and its dot product with
 * its expert's row from the same words, through subgroup shuffles, with no barrier, and
 * workgroup 0 writes the normed row from the words its lanes hold. On the H200 (2026-12-04,
 * perf-decode, the forms in turn three times each in one call, `call3` of session 39) 1 x 1024
 * 3.95 / 4.02 / 3.96 ms against the tree form's 4.05 / 4.01 / 4.05, 1 x 8192 4.43 / 4.47 / 4.49
 * against 4.55 / 4.53 / 4.50, 2 x 1024 and 2 x 8192 the same (6.74-6.88, 7.42-7.50). A first
 * one-pass form whose workgroup 0 read the row again to write it normed was slower (`call2`: 1 x
 * 1024 4.07-4.12 against 4.03-4.05): that write is the kernel's tail.
 *
 * ```ts
 * const p = moeRouterLogitsParams({ tokens: 64, experts: 128, hidden: 2048 }, 1e-6);
 * const { out, logits } = moeRouterLogitsRef(x, normWeight, w, p);
 * ```
 */
import type { KernelCase } from "./case.ts";
import type { Gpu } from "../src/gpu/device.ts";
import { type KernelSpec, unsupportedReason, type Variant, variantByName } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { rmsnormRef } from "./rmsnorm.ts";
import { routerNormCaseInputs, withPartials } from "./moe_router_norm.ts";

const params = defineParams({
  tokens: "u32",
  experts: "u32",
  hidden: "u32",
  eps: "f32",
  partials: "u32",
});

/** Experts a workgroup, and invocations an (expert, token) pair. */
const EG = 4;
const LANES = 32;
/** Largest hidden size of the staged forms (the row sits in workgroup memory, f32). */
export const STAGED_MAX_HIDDEN = 4096;
/** Tokens a workgroup (the shader takes TB of them; the forms of 2 and 4 were no faster). */
const TB = 1;

/**
 * f16 router and norm weights, read as 16-byte words (8 f16): `f16` sums the row's squares
 * first, in a tree of barriers, then the dot products; `f16-w32` and `f16-w8`
 * (moe_router_logits_lanes.wgsl, where subgroups hold lane groups of 32 or 8) add up both in one
 * pass over the words a lane reads, through subgroup shuffles.
 */
export const variants: readonly Variant[] = [
  {
    name: "f16",
    dtype: "f16",
    wideWords: true,
    consts: { WG: EG * TB * LANES, EG, TB, LANES, UNR: 8 },
    workgroupBytes: 4 * (EG * TB * LANES + TB),
  },
  ...[32, 8].map((lg) => ({
    name: `f16-w${lg}`,
    dtype: "f16" as const,
    wideWords: true,
    shader: "moe_router_logits_lanes.wgsl",
    subgroups: true,
    minSubgroupSize: lg,
    // (LANES: the tree form's name for LG, unread here)
    consts: { WG: EG * lg, EG, TB: 1, LG: lg, LANES: lg, UNR: 8 },
  })),
  ...[32, 16].map((eg) => ({
    name: `f16-s${eg}`,
    dtype: "f16" as const,
    wideWords: true,
    shader: "moe_router_logits_staged.wgsl",
    consts: { WG: 256, EG: eg, TB: 1, MAX_H: STAGED_MAX_HIDDEN },
    // the row, the experts' partial sums and the mean square's tree
    workgroupBytes: 4 * (STAGED_MAX_HIDDEN + 2 * 256),
  })),
];

/** The form the model takes here: the widest one-pass form that runs, else `f16`. */
export function moeRouterLogitsVariant(gpu: Gpu): Variant {
  return variants.find((v) => v.name.startsWith("f16-w") && unsupportedReason(gpu, v) === null) ??
    variants[0];
}

/**
 * The staged form for a step of `tokens` tokens (at least STAGED_ROUTER_MIN_TOKENS): 16 experts a
 * workgroup up to 16 tokens, 32 past them. On the H200 (session 43, per-kernel profile with the
 * forms in turn) 13.7 µs a call against 15.7 at 8 x 1024, 19.9 against 17.2 at 64 x 1024.
 */
export function stagedRouterLogitsVariant(tokens: number): Variant {
  return variantByName(spec, tokens <= 16 ? "f16-s16" : "f16-s32");
}

/** The fewest tokens of a step the model gives the staged forms (the lane forms below). */
export const STAGED_ROUTER_MIN_TOKENS = 3;

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_router_logits",
  shader: "moe_router_logits.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[tokens, hidden / 4] (residual)" },
    {
      name: "o_part",
      type: "vec4<f32>",
      access: "read",
      shape: "[partials, tokens, hidden / 4] (the residual's split-K partial sums, or unread)",
    },
    { name: "norm_weight", type: "vec4<T>", access: "read", shape: "[hidden / 4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[experts, hidden / 4]" },
    { name: "out", type: "vec4<f32>", access: "read_write", shape: "[tokens, hidden / 4]" },
    { name: "logits", type: "f32", access: "read_write", shape: "[tokens, experts]" },
  ],
  variants,
  grid: (p, v) => {
    // (the staged forms hold the row in a workgroup array of MAX_H values)
    const most = v.consts?.MAX_H;
    if (most !== undefined && p.hidden > most) {
      throw new Error(`moe_router_logits ${v.name}: hidden = ${p.hidden} is past its ${most}`);
    }
    return [
      Math.ceil(p.experts / (v.consts?.EG ?? EG)),
      Math.max(1, Math.ceil(p.tokens / (v.consts?.TB ?? TB))),
      1,
    ];
  },
};

/** The router's shape. */
export interface MoeRouterLogitsShape {
  readonly tokens: number;
  readonly experts: number;
  readonly hidden: number;
}

/** Validated params; throws naming the bad field. */
export function moeRouterLogitsParams(
  s: MoeRouterLogitsShape,
  eps: number,
  partials = 0,
): ParamValues<typeof params.fields> {
  if (!Number.isInteger(s.tokens) || s.tokens < 0) {
    throw new Error(`moe_router_logits: tokens = ${s.tokens} must be a count`);
  }
  if (!Number.isInteger(s.experts) || s.experts < 1) {
    throw new Error(`moe_router_logits: experts = ${s.experts} must be a positive integer`);
  }
  if (!Number.isInteger(s.hidden) || s.hidden < 8 || s.hidden % 8 !== 0) {
    throw new Error(`moe_router_logits: hidden = ${s.hidden} must be a positive multiple of 8`);
  }
  if (!(eps > 0)) throw new Error(`moe_router_logits: eps = ${eps} must be positive`);
  if (!Number.isInteger(partials) || partials < 0) {
    throw new Error(`moe_router_logits: partials = ${partials} must be a count`);
  }
  return {
    tokens: s.tokens,
    experts: s.experts,
    hidden: s.hidden,
    eps,
    partials,
  };
}

/**
 * CPU reference: rmsnormRef's rows (of x plus the partial sums `oPart`, added in order in f32,
 * where p.partials > 0), then their f64 dot products with each expert's row.
 */
export function moeRouterLogitsRef(
  x: Float32Array,
  normWeight: Float32Array,
  w: Float32Array,
  p: ParamValues<typeof params.fields>,
  oPart?: Float32Array,
): { out: Float32Array; logits: Float32Array } {
  const { tokens, experts, hidden } = p;
  const out = rmsnormRef(
    withPartials(x, oPart, p.partials, tokens * hidden),
    normWeight,
    tokens,
    hidden,
    p.eps,
  );
  const logits = new Float32Array(tokens * experts);
  for (let t = 0; t < tokens; t++) {
    for (let e = 0; e < experts; e++) {
      let sum = 0;
      for (let i = 0; i < hidden; i++) sum += out[t * hidden + i] * w[e * hidden + i];
      logits[t * experts + e] = sum;
    }
  }
  return { out, logits };
}

/**
 * A case: x normal, its rows at different scales (as residual rows are), the norm weight on a
 * grid of 1/8 and the router weight normal (both f16-rounded where stored, caseInputs); the
 * GPU's sums run in another order than the reference's, so the outputs match to rounding.
 */
function logitsCase(
  shape: MoeRouterLogitsShape,
  note = "",
  partials = 0,
): KernelCase<typeof params.fields> {
  const p = moeRouterLogitsParams(shape, 1e-6, partials);
  const { tokens, experts, hidden } = shape;
  return {
    label: `tokens=${tokens} E=${experts} H=${hidden}${
      partials ? ` + ${partials} partial sums` : ""
    } ${note}`.trim(),
    params: p,
    inputs: (rng) => ({
      ...routerNormCaseInputs(rng, tokens, hidden, experts),
      o_part: rng.fillNormal(new Float32Array(Math.max(1, partials) * tokens * hidden)),
    }),
    outputs: { out: tokens * hidden, logits: tokens * experts },
    reference: (inp) =>
      moeRouterLogitsRef(
        inp.x as Float32Array,
        inp.norm_weight as Float32Array,
        inp.w as Float32Array,
        p,
        inp.o_part as Float32Array,
      ),
    tolerance: () => ({ atol: 2e-5, rtol: 1e-4 }),
    bytes: () =>
      experts * hidden * 2 + hidden * 2 + tokens * (hidden * (8 + 4 * partials) + experts * 4),
    flops: tokens * (4 * hidden + experts * 2 * hidden),
  };
}

// (ragged expert groups, rows shorter than a pair's lanes)
export const cases = [
  logitsCase({ tokens: 1, experts: 8, hidden: 64 }),
  logitsCase({ tokens: 5, experts: 8, hidden: 40 }, "ragged hidden"),
  logitsCase({ tokens: 3, experts: 300, hidden: 64 }, "ragged experts"),
  logitsCase({ tokens: 11, experts: 24, hidden: 256 }),
  logitsCase({ tokens: 8, experts: 128, hidden: 2048 }, "qwen3-30b-a3b"),
  logitsCase({ tokens: 64, experts: 128, hidden: 2048 }, "qwen3-30b-a3b"),
  logitsCase({ tokens: 13, experts: 128, hidden: 2048 }, "qwen3-30b-a3b"),
  logitsCase({ tokens: 2, experts: 8, hidden: 4096 }, "mixtral-8x7b"),
  // the o projection's split-K partial sums (batch 1: 4 of them at Qwen3-30B-A3B)
  logitsCase({ tokens: 3, experts: 8, hidden: 40 }, "ragged hidden", 3),
  logitsCase({ tokens: 1, experts: 128, hidden: 2048 }, "qwen3-30b-a3b", 4),
  // rows longer than one round of a lane form's words (8 lanes of 8: the normed row read again)
  logitsCase({ tokens: 2, experts: 5, hidden: 1048 }, "rows past one round", 2),
];
