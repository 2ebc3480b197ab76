/**
 * The decode GEMV with the layer's input RMSNorm fused:
 * `y[m, n] (+)= rmsnorm(x[m, :]) . w[n, :]`, where
 * `rmsnorm(x) = x * rsqrt(mean(x^2) + eps) * norm_weight` (rmsnorm's expression), in the
 * one-row lane-group forms of gemv (ONE_ROW_FORMS, the same names): each lane group reads its x
 * row once as its dot products need it, and sums its squares on the way, so the scale costs a
 * subgroup sum and no pass of its own (shaders/gemv_decode_norm.wgsl). It reads the residual
 * row where the plain GEMV reads the row an rmsnorm (or moe_combine_norm) wrote: with the MoE
 * down GEMM's combine fused (moe_gemm_down_combine), a batch-1 layer needs neither.
 *
 * ```ts
 * const p = gemvNormParams({ m: 1, n: 5120, k: 2048 }, 1e-6);
 * const y = gemvNormRef(x, normWeight, w, p);
 * ```
 */
import type { KernelSpec, Variant } from "./kernel.ts";
import { laneGroupVariants } from "./lane_group_variants.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { checkOneRowShape, laneGroupGrid, linearRef, ONE_ROW_FORMS, oneRowCase } from "./gemv.ts";
import { rmsnormRef } from "./rmsnorm.ts";

/** `splits`: always 1 (the norm needs the whole row; gemv's body reads it). */
const params = defineParams({
  m: "u32",
  n: "u32",
  k: "u32",
  accumulate: "u32",
  splits: "u32",
  eps: "f32",
});

export const spec: KernelSpec<typeof params.fields> = {
  name: "gemv_norm",
  shader: "gemv_decode_norm.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[m, k/4] (the residual)" },
    { name: "norm_weight", type: "vec4<T>", access: "read", shape: "[k/4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[n, k/4]" },
    { name: "y", type: "f32", access: "read_write", shape: "[m, n] (+= when accumulate)" },
  ],
  variants: laneGroupVariants("gemv_decode_norm.wgsl", ONE_ROW_FORMS),
  grid: (p, v, gpu) => laneGroupGrid(p, v, gpu),
};

/** Validated params; throws naming the bad field. */
export function gemvNormParams(
  s: { readonly m: number; readonly n: number; readonly k: number; readonly accumulate?: boolean },
  eps: number,
): ParamValues<typeof params.fields> {
  checkOneRowShape("gemv_norm", s, eps);
  return { m: s.m, n: s.n, k: s.k, accumulate: s.accumulate ? 1 : 0, splits: 1, eps };
}

/** CPU reference: rmsnormRef's rows, then linearRef (y0 + rows w^T where accumulating). */
export function gemvNormRef(
  x: Float32Array,
  normWeight: Float32Array,
  w: Float32Array,
  p: ParamValues<typeof params.fields>,
  y0?: Float32Array,
): Float32Array {
  const h = rmsnormRef(x, normWeight, p.m, p.k, p.eps);
  return linearRef(h, w, p.m, p.n, p.k, p.accumulate ? y0 : undefined);
}

function normCase(m: number, n: number, k: number, accumulate = false) {
  const p = gemvNormParams({ m, n, k, accumulate }, 1e-6);
  const es = (v: Variant) => v.dtype === "f16" ? 2 : 4;
  return oneRowCase<typeof params.fields>({
    label: `m=${m} n=${n} k=${k}`,
    params: p,
    m,
    n,
    k,
    accumulate,
    // rows at different scales, as residual rows are; the norm weight on a grid of 1/8
    x: (rng) => {
      const x = rng.fillNormal(new Float32Array(m * k));
      for (let r = 0; r < m; r++) {
        const scale = 0.5 + 4 * rng.float();
        for (let i = 0; i < k; i++) x[r * k + i] *= scale;
      }
      return x;
    },
    more: (rng) => ({ norm_weight: Float32Array.from({ length: k }, () => rng.int(4, 17) / 8) }),
    reference: (inp) =>
      gemvNormRef(
        inp.x as Float32Array,
        inp.norm_weight as Float32Array,
        inp.w as Float32Array,
        p,
        inp.y as Float32Array | undefined,
      ),
    moreBytes: (v) => k * es(v),
    flops: 2 * m * n * k + 4 * m * k,
  });
}

export const cases = [
  normCase(1, 7, 12),
  // k / 4 = 66: the unrolled loop, then its one-step tail; several rows, one a pass
  normCase(3, 45, 264, true),
  normCase(1, 301, 300),
  normCase(1, 5120, 2048, false),
  normCase(1, 2048, 4096, true),
];
