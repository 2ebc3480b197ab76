/**
 * Deterministic pseudo-random fill on the GPU: `out[offset + i] = base + scale * u`, u of
 * unit variance from a counter-based hash of (seed, index). Synthetic production-shaped
 * models generate their weights with it without any host traffic.
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";
import { roundToF16InPlace } from "../src/util/f16.ts";

const params = defineParams({
  offset: "u32",
  count: "u32",
  seed: "u32",
  base: "f32",
  scale: "f32",
});
const WG = 256;

export const spec: KernelSpec<typeof params.fields> = {
  name: "fill_random",
  shader: "fill_random.wgsl",
  params,
  bindings: [{ name: "out", type: "T", access: "read_write", shape: "[offset + count]" }],
  variants: [
    { name: "f32", dtype: "f32", consts: { WG } },
    { name: "f16", dtype: "f16", consts: { WG } },
  ],
  grid: (p, _v, gpu) => grid1d(Math.ceil(p.count / WG), gpu),
};

function mix32(v: number): number {
  let x = v >>> 0;
  x = Math.imul(x ^ (x >>> 16), 0x7feb352d) >>> 0;
  x = Math.imul(x ^ (x >>> 15), 0x846ca68b) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}

/** The value the GPU writes at `index` (before rounding to the storage type). */
export function fillRandomValue(index: number, seed: number, base: number, scale: number): number {
  const h = mix32((index ^ mix32(seed)) >>> 0);
  const u = Math.fround(Math.fround((h >>> 8) / 16777216) * 2 - 1);
  return Math.fround(base + Math.fround(Math.fround(scale * 1.7320508) * u));
}

/** CPU reference over [offset, offset + count) of an array of `length` (rest unchanged). */
export function fillRandomRef(
  prior: Float32Array,
  offset: number,
  count: number,
  seed: number,
  base: number,
  scale: number,
): Float32Array {
  const out = new Float32Array(prior);
  for (let i = 0; i < count; i++) out[offset + i] = fillRandomValue(offset + i, seed, base, scale);
  return out;
}

function fillCase(length: number, offset: number, count: number, seed: number) {
  const c: KernelCase<typeof params.fields> = {
    label: `${count} at ${offset} of ${length} seed ${seed}`,
    params: { offset, count, seed, base: 0.25, scale: 0.5 },
    inputs: (rng) => ({ out: rng.fillNormal(new Float32Array(length)) }),
    outputs: {},
    reference: (inp, v) => {
      const out = fillRandomRef(inp.out as Float32Array, offset, count, seed, 0.25, 0.5);
      return { out: v.dtype === "f16" ? roundToF16InPlace(out) : out };
    },
    // WGSL lets base + scale * u contract to one fused multiply-add (the H200 does; lavapipe
    // does not): a 1-ulp difference of a value near 1 (2.4e-7 absolute, however small the
    // result after cancelling), which f16 rounding can turn into one f16 ulp.
    tolerance: (v) =>
      v.dtype === "f16" ? { atol: 1e-6, rtol: 2 ** -10 } : { atol: 2.4e-7, rtol: 2.4e-7 },
    bytes: (v) => count * (v.dtype === "f16" ? 2 : 4),
    flops: 0,
  };
  return c;
}

export const cases = [
  fillCase(10, 3, 5, 1),
  fillCase(1001, 0, 1001, 77),
  fillCase(64 * 2 ** 20, 0, 64 * 2 ** 20, 5),
];
