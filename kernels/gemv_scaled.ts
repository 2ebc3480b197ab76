/**
 * The decode GEMV of a row already weighted by the layer's input norm weight, which applies the
 * RMSNorm's scale from the residual's sum of squares given in block sums:
 * `y[m, n] (+)= rsqrt(sum_b ss_part[m, b] / k + eps) * (x[m, :] . w[n, :])`, where
 * `x = residual * norm_weight` and `ss_part` the residual's squares summed in blocks, as
 * moe_gemm_down_combine leaves them for the next layer (norm_next). In the one-row lane-group
 * forms of gemv (ONE_ROW_FORMS, the same names). It reads x as the plain GEMV does, where
 * gemv_norm (the first layer's, or one after a layer whose kernels leave no such row) multiplies
 * each x vec4 by the norm weight and sums its squares as it reads it.
 *
 * ```ts
 * const p = gemvScaledParams({ m: 1, n: 5120, k: 2048, parts: 512 }, 1e-6);
 * const y = gemvScaledRef(x, ssPart, w, p);
 * ```
 */
import type { KernelSpec } from "./kernel.ts";
import { laneGroupVariants } from "./lane_group_variants.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { checkOneRowShape, laneGroupGrid, linearRef, ONE_ROW_FORMS, oneRowCase } from "./gemv.ts";

/** `splits`: always 1 (gemv's body reads it); `parts`: block sums of squares a row. */
const params = defineParams({
  m: "u32",
  n: "u32",
  k: "u32",
  accumulate: "u32",
  splits: "u32",
  eps: "f32",
  parts: "u32",
});

export const spec: KernelSpec<typeof params.fields> = {
  name: "gemv_scaled",
  shader: "gemv_decode_scaled.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[m, k/4] (residual * norm weight)" },
    { name: "ss_part", type: "f32", access: "read", shape: "[m, parts] (the residual's squares)" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[n, k/4]" },
    { name: "y", type: "f32", access: "read_write", shape: "[m, n] (+= when accumulate)" },
  ],
  variants: laneGroupVariants("gemv_decode_scaled.wgsl", ONE_ROW_FORMS),
  grid: (p, v, gpu) => laneGroupGrid(p, v, gpu),
};

/** Validated params; throws naming the bad field. */
export function gemvScaledParams(
  s: {
    readonly m: number;
    readonly n: number;
    readonly k: number;
    readonly parts: number;
    readonly accumulate?: boolean;
  },
  eps: number,
): ParamValues<typeof params.fields> {
  checkOneRowShape("gemv_scaled", s, eps);
  if (!Number.isInteger(s.parts) || s.parts < 1) {
    throw new Error(`gemv_scaled: parts = ${s.parts} must be a positive integer`);
  }
  return {
    m: s.m,
    n: s.n,
    k: s.k,
    accumulate: s.accumulate ? 1 : 0,
    splits: 1,
    eps,
    parts: s.parts,
  };
}

/** CPU reference: linearRef's rows (y0 + x w^T where accumulating), each times its scale. */
export function gemvScaledRef(
  x: Float32Array,
  ssPart: Float32Array,
  w: Float32Array,
  p: ParamValues<typeof params.fields>,
  y0?: Float32Array,
): Float32Array {
  const y = linearRef(x, w, p.m, p.n, p.k);
  for (let r = 0; r < p.m; r++) {
    let ss = 0;
    for (let b = 0; b < p.parts; b++) ss += ssPart[r * p.parts + b];
    const scale = 1 / Math.sqrt(ss / p.k + p.eps);
    for (let j = 0; j < p.n; j++) {
      y[r * p.n + j] = y[r * p.n + j] * scale + (p.accumulate && y0 ? y0[r * p.n + j] : 0);
    }
  }
  return y;
}

function scaledCase(m: number, n: number, k: number, parts: number, accumulate = false) {
  const p = gemvScaledParams({ m, n, k, parts, accumulate }, 1e-6);
  return oneRowCase<typeof params.fields>({
    label: `m=${m} n=${n} k=${k} parts=${parts}`,
    params: p,
    m,
    n,
    k,
    accumulate,
    // block sums of the squares of rows at different scales
    more: (rng) => ({
      ss_part: Float32Array.from(
        { length: m * parts },
        () => (k / parts) * (0.25 + 4 * rng.float()),
      ),
    }),
    reference: (inp) =>
      gemvScaledRef(
        inp.x as Float32Array,
        inp.ss_part as Float32Array,
        inp.w as Float32Array,
        p,
        inp.y as Float32Array | undefined,
      ),
    moreBytes: () => m * parts * 4,
    flops: 2 * m * n * k + m * parts,
  });
}

export const cases = [
  scaledCase(1, 7, 12, 3),
  // k / 4 = 66: the unrolled loop, then its one-step tail; several rows, one a pass
  scaledCase(3, 45, 264, 70, true),
  scaledCase(1, 301, 300, 75),
  scaledCase(1, 5120, 2048, 512),
];
