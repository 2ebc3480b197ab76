/**
 * The sum of split-K partials: `c[i] (+)= sum_s part[s, i]` over `count` elements (`+=` when
 * accumulate: the fused residual add of a split GEMM), one invocation an element.
 *
 * ```ts
 * gemm.dispatch(pass, "f16", key, { a: x, b: w, c: part }); // splits > 1: c[split, m, n]
 * sum.dispatch(pass, "f32", key, { part, c: y });           // y (+)= the splits' sum
 * ```
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({ count: "u32", splits: "u32", accumulate: "u32" });
const WG = 256;

export const spec: KernelSpec<typeof params.fields> = {
  name: "split_sum",
  shader: "split_sum.wgsl",
  params,
  bindings: [
    { name: "part", type: "f32", access: "read", shape: "[splits, count]" },
    { name: "c", type: "f32", access: "read_write", shape: "[count] (+= when accumulate)" },
  ],
  variants: [{ name: "f32", dtype: "f32", consts: { WG } }],
  grid: (p, _v, gpu) => grid1d(Math.ceil(p.count / WG), gpu),
};

/** CPU reference: c0 (when accumulating) plus every split's partial, element by element. */
export function splitSumRef(
  part: Float32Array,
  count: number,
  splits: number,
  c0?: Float32Array,
): Float32Array {
  const c = c0 ? new Float32Array(c0) : new Float32Array(count);
  for (let s = 0; s < splits; s++) {
    for (let i = 0; i < count; i++) c[i] += part[s * count + i];
  }
  return c;
}

function sumCase(count: number, splits: number, accumulate: boolean): KernelCase<
  typeof params.fields
> {
  return {
    label: `count=${count} splits=${splits}${accumulate ? " c+=" : ""}`,
    params: { count, splits, accumulate: accumulate ? 1 : 0 },
    inputs: (rng) => ({
      part: rng.fillNormal(new Float32Array(splits * count)),
      ...(accumulate ? { c: rng.fillNormal(new Float32Array(count)) } : {}),
    }),
    outputs: accumulate ? {} : { c: count },
    reference: (inp) => ({
      c: splitSumRef(
        inp.part as Float32Array,
        count,
        splits,
        accumulate ? inp.c as Float32Array : undefined,
      ),
    }),
    tolerance: () => ({ atol: 1e-5, rtol: 1e-5 }),
    bytes: () => (splits + (accumulate ? 2 : 1)) * count * 4,
    flops: splits * count,
  };
}

export const cases = [sumCase(7, 1, false), sumCase(1000, 3, true), sumCase(64 * 2048, 16, true)];
