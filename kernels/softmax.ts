/** Row softmax over the last axis, f32 in and out. */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({ rows: "u32", n: "u32" });

export const spec: KernelSpec<typeof params.fields> = {
  name: "softmax",
  shader: "softmax.wgsl",
  params,
  bindings: [
    { name: "x", type: "f32", access: "read", shape: "[rows, n]" },
    { name: "out", type: "f32", access: "read_write", shape: "[rows, n]" },
  ],
  variants: [{ name: "f32", dtype: "f32", consts: { WG: 128 } }],
  grid: (p, _v, gpu) => grid1d(p.rows, gpu),
};

/** CPU reference. */
export function softmaxRef(x: Float32Array, rows: number, n: number): Float32Array {
  const out = new Float32Array(rows * n);
  for (let r = 0; r < rows; r++) {
    let m = -Infinity;
    for (let i = 0; i < n; i++) m = Math.max(m, x[r * n + i]);
    let s = 0;
    for (let i = 0; i < n; i++) s += Math.exp(x[r * n + i] - m);
    for (let i = 0; i < n; i++) out[r * n + i] = Math.exp(x[r * n + i] - m) / s;
  }
  return out;
}

function softmaxCase(rows: number, n: number, scale: number): KernelCase<typeof params.fields> {
  return {
    label: `rows=${rows} n=${n}`,
    params: { rows, n },
    inputs: (rng) => ({ x: rng.fillNormal(new Float32Array(rows * n), scale) }),
    outputs: { out: rows * n },
    reference: (inp) => ({ out: softmaxRef(inp.x as Float32Array, rows, n) }),
    tolerance: () => ({ atol: 1e-6, rtol: 1e-4 }),
    bytes: () => rows * n * 8,
    flops: rows * n * 5,
  };
}

export const cases = [
  softmaxCase(1, 8, 1),
  softmaxCase(9, 128, 3),
  softmaxCase(31, 1000, 10),
  softmaxCase(64, 151936, 4),
];
