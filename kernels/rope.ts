/** Rotary position embedding (rotate-half form) in place on [tokens, heads, head_dim]. */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({ tokens: "u32", heads: "u32", head_dim: "u32" });
const WG = 64;

export const spec: KernelSpec<typeof params.fields> = {
  name: "rope",
  shader: "rope.wgsl",
  params,
  bindings: [
    { name: "positions", type: "i32", access: "read", shape: "[tokens]" },
    { name: "cos_sin", type: "f32", access: "read", shape: "[max_positions, head_dim]" },
    { name: "x", type: "f32", access: "read_write", shape: "[tokens, heads, head_dim]" },
  ],
  variants: [{ name: "f32", dtype: "f32", consts: { WG } }],
  grid: (p, _v, gpu) => grid1d(Math.ceil((p.tokens * p.heads * p.head_dim / 2) / WG), gpu),
};

/**
 * The angle table: row p holds cos(p * f_i) for i < head_dim/2, then sin(p * f_i), with
 * f_i = theta^(-2i/head_dim), computed in f64.
 */
export function ropeTable(maxPositions: number, headDim: number, theta: number): Float32Array {
  const half = headDim / 2;
  const table = new Float32Array(maxPositions * headDim);
  for (let p = 0; p < maxPositions; p++) {
    for (let i = 0; i < half; i++) {
      const angle = p * Math.pow(theta, (-2 * i) / headDim);
      table[p * headDim + i] = Math.cos(angle);
      table[p * headDim + half + i] = Math.sin(angle);
    }
  }
  return table;
}

/** CPU reference (f64 angles), returns a rotated copy. */
export function ropeRef(
  x: Float32Array,
  positions: Int32Array,
  heads: number,
  headDim: number,
  theta: number,
): Float32Array {
  const out = new Float32Array(x);
  const half = headDim / 2;
  for (let t = 0; t < positions.length; t++) {
    for (let h = 0; h < heads; h++) {
      const base = (t * heads + h) * headDim;
      for (let i = 0; i < half; i++) {
        const angle = positions[t] * Math.pow(theta, (-2 * i) / headDim);
        const c = Math.cos(angle), s = Math.sin(angle);
        const x1 = x[base + i], x2 = x[base + i + half];
        out[base + i] = x1 * c - x2 * s;
        out[base + i + half] = x2 * c + x1 * s;
      }
    }
  }
  return out;
}

function ropeCase(tokens: number, heads: number, headDim: number, maxPos: number) {
  const c: KernelCase<typeof params.fields> = {
    label: `tokens=${tokens} heads=${heads} head_dim=${headDim} pos<${maxPos}`,
    params: { tokens, heads, head_dim: headDim },
    inputs: (rng) => ({
      positions: new Int32Array(tokens).map(() => rng.int(0, maxPos)),
      cos_sin: ropeTable(maxPos, headDim, 1e6),
      x: rng.fillNormal(new Float32Array(tokens * heads * headDim)),
    }),
    outputs: {},
    reference: (inp) => ({
      x: ropeRef(inp.x as Float32Array, inp.positions as Int32Array, heads, headDim, 1e6),
    }),
    tolerance: () => ({ atol: 1e-6, rtol: 1e-5 }),
    bytes: () => tokens * heads * headDim * 8 + tokens * 4,
    flops: tokens * heads * headDim * 3,
  };
  return c;
}

export const cases = [
  ropeCase(1, 1, 16, 16),
  ropeCase(13, 3, 64, 4096),
  ropeCase(64, 32, 128, 40960),
];
