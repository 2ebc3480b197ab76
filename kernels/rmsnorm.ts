/**
 * RMSNorm over the last axis: `out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight`.
 * Activations are f32; the weight is in the storage type T.
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({ rows: "u32", n: "u32", eps: "f32" });

export const spec: KernelSpec<typeof params.fields> = {
  name: "rmsnorm",
  shader: "rmsnorm.wgsl",
  params,
  bindings: [
    { name: "x", type: "f32", access: "read", shape: "[rows, n]" },
    { name: "weight", type: "T", access: "read", shape: "[n]" },
    { name: "out", type: "f32", access: "read_write", shape: "[rows, n]" },
  ],
  variants: [
    { name: "f32", dtype: "f32", consts: { WG: 256 } },
    { name: "f16", dtype: "f16", consts: { WG: 256 } },
  ],
  grid: (p, _v, gpu) => grid1d(p.rows, gpu),
};

/** CPU reference (f64 sum of squares). */
export function rmsnormRef(
  x: Float32Array,
  weight: Float32Array,
  rows: number,
  n: number,
  eps: number,
): Float32Array {
  const out = new Float32Array(rows * n);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < n; i++) ss += x[r * n + i] ** 2;
    const scale = 1 / Math.sqrt(ss / n + eps);
    for (let i = 0; i < n; i++) out[r * n + i] = x[r * n + i] * scale * weight[i];
  }
  return out;
}

/** `std`: the rows' spread; about sqrt(eps) makes eps count (every case else would pass without it). */
function rmsCase(rows: number, n: number, std = 1): KernelCase<typeof params.fields> {
  return {
    label: `rows=${rows} n=${n}${std === 1 ? "" : ` rms ~ ${std}`}`,
    params: { rows, n, eps: 1e-6 },
    inputs: (rng) => ({
      x: rng.fillNormal(new Float32Array(rows * n), std),
      weight: rng.fillUniform(new Float32Array(n), 0.5, 1.5),
    }),
    outputs: { out: rows * n },
    reference: (inp, _v) => ({
      out: rmsnormRef(inp.x as Float32Array, inp.weight as Float32Array, rows, n, 1e-6),
    }),
    tolerance: () => ({ atol: 1e-5, rtol: 1e-4 }),
    bytes: (v) => rows * n * 8 + n * (v.dtype === "f16" ? 2 : 4),
    flops: rows * n * 4,
  };
}

export const cases = [
  rmsCase(1, 64),
  rmsCase(7, 300),
  rmsCase(7, 300, 1e-3),
  rmsCase(33, 2048),
  rmsCase(128, 4096),
];
