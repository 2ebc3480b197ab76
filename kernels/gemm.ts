/**
 * Prefill-shaped GEMM `c[m, n] = sum_k a[m, k] * b[n, k]` (b in the Linear layout
 * [out, in]), tiled through workgroup memory: f32 / f16 variants take 64-row x 128-column
 * tiles of c (128 invocations, 8 x 8 outputs each; any m, n, k); on adapters with f16
 * subgroup matrices (tensor cores) a variant multiplies 16x16x16 f16 tiles (32 x 64 a
 * workgroup) with f32 accumulation. a and b stay scalar bindings: that variant's shader
 * indexes them per element.
 */
import type { KernelCase } from "./case.ts";
import type { KernelSpec } from "./kernel.ts";
import { linearRef } from "./gemv.ts";
import { defineParams } from "./params.ts";
import { roundToF16InPlace } from "../src/util/f16.ts";

const params = defineParams({
  m: "u32",
  n: "u32",
  k: "u32",
  accumulate: "u32",
  /** Split-K: k values a split sums (a multiple of 16 when splits > 1; k with one split). */
  k_chunk: "u32",
  /** Split-K: splits (grid z); more than one writes partials c[split, m, n] (split_sum). */
  splits: "u32",
});

/** Params of gemm. */
export type GemmParams = { readonly [K in keyof typeof params.fields]: number };

export const spec: KernelSpec<typeof params.fields> = {
  name: "gemm",
  shader: "gemm.wgsl",
  params,
  bindings: [
    { name: "a", type: "f32", access: "read", shape: "[m, k]" },
    { name: "b", type: "T", access: "read", shape: "[n, k]" },
    { name: "c", type: "f32", access: "read_write", shape: "[m, n] (+= when accumulate)" },
  ],
  variants: [
    // SPLITK: the form reads k_chunk / splits (the others take one split).
    { name: "f32", dtype: "f32", consts: { TM: 64, TN: 128, SPLITK: 1 } },
    { name: "f16", dtype: "f16", consts: { TM: 64, TN: 128, SPLITK: 1 } },
    // The earlier 64 x 64 tiles (4 x 4 outputs an invocation): twice the workgroups of the
    // form above; with them 256-row prefills ran 9-14% faster on the H200 end to end.
    { name: "f32-t64", dtype: "f32", shader: "gemm_tile64.wgsl", consts: { TM: 64, TN: 64 } },
    { name: "f16-t64", dtype: "f16", shader: "gemm_tile64.wgsl", consts: { TM: 64, TN: 64 } },
    {
      name: "f16-sgmat",
      dtype: "f16",
      subgroupMatrix: { m: 16, n: 16, k: 16 },
      shader: "gemm_subgroup_matrix.wgsl",
      consts: { TM: 32 },
    },
  ],
  // TM x TN: rows x columns of c a workgroup owns.
  grid: (p, v) => {
    const one = p.splits === 1 && p.k_chunk >= p.k;
    if (!one && (!v.consts?.SPLITK || p.splits < 1 || p.k_chunk % 16 !== 0 || p.k_chunk < 16)) {
      throw new Error(
        `gemm/${v.name}: splits ${p.splits} x k_chunk ${p.k_chunk} (split-K needs the 64 x 128 ` +
          "form and k_chunk a multiple of 16; see planGemmSplits)",
      );
    }
    if (!one && (p.splits - 1) * p.k_chunk >= p.k) {
      throw new Error(`gemm: ${p.splits} splits of ${p.k_chunk} overrun k = ${p.k}`);
    }
    return [Math.ceil(p.n / (v.consts?.TN ?? 64)), Math.ceil(p.m / (v.consts?.TM ?? 64)), p.splits];
  },
};

/**
 * Split-K plan of the 64 x 128 form for a skinny product (decode's 9-128 rows): enough
 * splits that the (column tile, row tile, split) workgroups number about `targetWorkgroups`,
 * each split at least `minChunk` deep (a multiple of 16). One split where the tiles alone
 * fill the GPU (then the GEMM writes c itself).
 *
 * ```ts
 * planGemmSplits(64, 2048, 4096); // { kChunk: 256, splits: 16 }: 16 tiles x 16 splits
 * ```
 */
export function planGemmSplits(
  m: number,
  n: number,
  k: number,
  targetWorkgroups = 264,
  minChunk = 256,
): { kChunk: number; splits: number } {
  const tiles = Math.ceil(n / 128) * Math.ceil(m / 64);
  const want = Math.min(Math.ceil(targetWorkgroups / tiles), Math.floor(k / minChunk));
  if (want <= 1) return { kChunk: k, splits: 1 };
  const kChunk = Math.ceil(k / want / 16) * 16;
  return { kChunk, splits: Math.ceil(k / kChunk) };
}

/** One-split params of a product (`k_chunk` = k): c (+)= a b^T. */
export function gemmParams(m: number, n: number, k: number, accumulate: boolean): GemmParams {
  return { m, n, k, accumulate: accumulate ? 1 : 0, k_chunk: k, splits: 1 };
}

function gemmCase(
  m: number,
  n: number,
  k: number,
  accumulate = false,
): KernelCase<typeof params.fields> {
  return {
    label: `m=${m} n=${n} k=${k}${accumulate ? " c+=" : ""}`,
    params: gemmParams(m, n, k, accumulate),
    inputs: (rng) => ({
      a: rng.fillNormal(new Float32Array(m * k)),
      b: rng.fillNormal(new Float32Array(n * k), 1 / Math.sqrt(k)),
      ...(accumulate ? { c: rng.fillNormal(new Float32Array(m * n)) } : {}),
    }),
    outputs: accumulate ? {} : { c: m * n },
    reference: (inp, v) => {
      // The subgroup-matrix variant rounds a to f16 on its way into the tensor cores.
      const a = inp.a as Float32Array;
      const left = v.subgroupMatrix ? roundCopy(a) : a;
      const c0 = accumulate ? inp.c as Float32Array : undefined;
      return { c: linearRef(left, inp.b as Float32Array, m, n, k, c0) };
    },
    tolerance: () => ({ atol: 2e-4, rtol: 2e-4 }),
    bytes: (v) => n * k * (v.dtype === "f16" ? 2 : 4) + m * k * 4 + m * n * 4,
    flops: 2 * m * n * k,
  };
}

/** A split-K case (64 x 128 forms only): the partials c[split, m, n] of planGemmSplits. */
function splitCase(m: number, n: number, k: number): KernelCase<typeof params.fields> {
  const { kChunk, splits } = planGemmSplits(m, n, k, 264, 16);
  return {
    label: `m=${m} n=${n} k=${k} split-K ${splits} x ${kChunk}`,
    params: { m, n, k, accumulate: 0, k_chunk: kChunk, splits },
    variants: ["f32", "f16"],
    inputs: (rng) => ({
      a: rng.fillNormal(new Float32Array(m * k)),
      b: rng.fillNormal(new Float32Array(n * k), 1 / Math.sqrt(k)),
    }),
    outputs: { c: splits * m * n },
    reference: (inp) => {
      const a = inp.a as Float32Array, b = inp.b as Float32Array;
      const c = new Float32Array(splits * m * n);
      for (let s = 0; s < splits; s++) {
        const k0 = s * kChunk, k1 = Math.min(k, k0 + kChunk);
        for (let r = 0; r < m; r++) {
          for (let j = 0; j < n; j++) {
            let sum = 0;
            for (let i = k0; i < k1; i++) sum += a[r * k + i] * b[j * k + i];
            c[(s * m + r) * n + j] = sum;
          }
        }
      }
      return { c };
    },
    tolerance: () => ({ atol: 2e-4, rtol: 2e-4 }),
    bytes: (v) => n * k * (v.dtype === "f16" ? 2 : 4) + m * k * 4 + splits * m * n * 4,
    flops: 2 * m * n * k,
  };
}

function roundCopy(a: Float32Array): Float32Array {
  return roundToF16InPlace(new Float32Array(a));
}
export const cases = [
  gemmCase(1, 5, 8),
  gemmCase(67, 131, 100),
  gemmCase(70, 33, 48, true),
  // Two partial 64 x 128 tiles each way, k neither a multiple of 16 nor of 4.
  gemmCase(130, 259, 37, true),
  gemmCase(64, 5120, 2048),
  gemmCase(256, 512, 512),
  gemmCase(1024, 1024, 1024),
  // split-K: a ragged last split (k = 1000), then decode's 64-row o projection
  splitCase(19, 300, 1000),
  splitCase(64, 2048, 4096),
];
