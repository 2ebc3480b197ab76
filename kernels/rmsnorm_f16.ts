/**
 * RMSNorm written as f16 only: `out16[r, :] = f16(x[r, :] * rsqrt(mean(x[r, :]^2) + eps) *
 * weight)`, clamped to f16's finite range as cast_f16 writes it. Where a norm's only reader is
 * a tensor-core GEMM that would cast its f32 rows to f16 first (the MoE router's, and the expert
 * GEMMs' prefill forms, which read the same f16 rows), this writes that operand in one dispatch:
 * at 8 x 2048 on the H200 (session 49's profile) rmsnorm took 84 us a layer and the cast after
 * it 56. Activations are f32, the weight and the output f16; n even.
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { rmsnormRef, spec as rmsnormSpec } from "./rmsnorm.ts";
import { clampF16, roundToF16InPlace } from "../src/util/f16.ts";

const params = rmsnormSpec.params;

export const spec: KernelSpec<typeof params.fields> = {
  name: "rmsnorm_f16",
  shader: "rmsnorm_f16.wgsl",
  params,
  bindings: [
    { name: "x", type: "f32", access: "read", shape: "[rows, n]" },
    { name: "weight", type: "T", access: "read", shape: "[n]" },
    { name: "out16", type: "T", access: "read_write", shape: "[rows, n] (f16)" },
  ],
  variants: [{ name: "f16", dtype: "f16", consts: { WG: 256 } }],
  grid: (p, _v, gpu) => grid1d(p.rows, gpu),
};

/** `std`: the rows' spread; `big`: some values past f16's range after the norm (clamped). */
function rmsF16Case(
  rows: number,
  n: number,
  std = 1,
  big = false,
): KernelCase<typeof params.fields> {
  return {
    label: `rows=${rows} n=${n}${std === 1 ? "" : ` rms ~ ${std}`}${
      big ? ", weights past f16's range" : ""
    }`,
    params: { rows, n, eps: 1e-6 },
    inputs: (rng) => {
      const weight = rng.fillUniform(new Float32Array(n), 0.5, 1.5);
      const x = rng.fillNormal(new Float32Array(rows * n), std);
      // column 3 weighted 6e4, and rows 0 and 1 there at 4 and -4 (about 3.5 rms): past
      // +-65504 after the norm, clamped, not inf
      if (big) {
        weight[3] = 6e4;
        x[3] = 4;
        x[n + 3] = -4;
      }
      return { x, weight };
    },
    outputs: { out16: rows * n },
    reference: (inp) => ({
      out16: roundToF16InPlace(
        clampF16(rmsnormRef(inp.x as Float32Array, inp.weight as Float32Array, rows, n, 1e-6)),
      ),
    }),
    // one f16 rounding of the output: up to an ulp (2^-10 of it) where the f32 sums round the
    // other way
    tolerance: () => ({ atol: 1e-5, rtol: 2e-3 }),
    bytes: () => rows * n * 6 + n * 2,
    flops: rows * n * 4,
  };
}

export const cases = [
  rmsF16Case(1, 64),
  rmsF16Case(7, 300),
  rmsF16Case(7, 300, 1e-3),
  rmsF16Case(5, 64, 1, true),
  rmsF16Case(33, 2048),
  rmsF16Case(512, 2048),
];
