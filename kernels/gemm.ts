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

const params = defineParams({ m: "u32", n: "u32", k: "u32", accumulate: "u32" });

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
    { name: "f32", dtype: "f32", consts: { TM: 64, TN: 128 } },
    { name: "f16", dtype: "f16", consts: { TM: 64, TN: 128 } },
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
  grid: (p, v) => [Math.ceil(p.n / (v.consts?.TN ?? 64)), Math.ceil(p.m / (v.consts?.TM ?? 64)), 1],
};

function gemmCase(
  m: number,
  n: number,
  k: number,
  accumulate = false,
): KernelCase<typeof params.fields> {
  return {
    label: `m=${m} n=${n} k=${k}${accumulate ? " c+=" : ""}`,
    params: { m, n, k, accumulate: accumulate ? 1 : 0 },
    inputs: (rng) => ({
      a: rng.fillNormal(new Float32Array(m * k)),
      b: rng.fillNormal(new Float32Array(n * k), 1 / Math.sqrt(k)),
      ...(accumulate ? { c: rng.fillNormal(new Float32Array(m * n)) } : {}),
    }),
    outputs: accumulate ? {} : { c: m * n },
    // One reference for the variants of a storage type (validate caches it by inputsKind); the
    // subgroup-matrix variant's rounding of a to f16 on its way into the tensor cores is covered
    // by its tolerance, as in the MoE GEMMs'.
    reference: (inp) => {
      const c0 = accumulate ? inp.c as Float32Array : undefined;
      return { c: linearRef(inp.a as Float32Array, inp.b as Float32Array, m, n, k, c0) };
    },
    tolerance: (v) => v.subgroupMatrix ? { atol: 5e-3, rtol: 5e-3 } : { atol: 2e-4, rtol: 2e-4 },
    bytes: (v) => n * k * (v.dtype === "f16" ? 2 : 4) + m * k * 4 + m * n * 4,
    flops: 2 * m * n * k,
  };
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
];
