/**
 * Adds the split-K partial sums of `gemm_tc` (`part` `[splits, count]`) into `out`
 * (`out = sum` or, with accumulate, `out += sum`: the residual add of the layer). count must
 * be a multiple of 4 (it is m x n with n a multiple of 16).
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";

const params = defineParams({ count4: "u32", splits: "u32", accumulate: "u32" });
const WG = 256;
const MAX_WORKGROUPS = 4096;

export const spec: KernelSpec<typeof params.fields> = {
  name: "splitk_reduce",
  shader: "splitk_reduce.wgsl",
  params,
  bindings: [
    { name: "part", type: "vec4<f32>", access: "read", shape: "[splits, count/4]" },
    {
      name: "out",
      type: "vec4<f32>",
      access: "read_write",
      shape: "[count/4] (+= when accumulate)",
    },
  ],
  variants: [{ name: "f32", dtype: "f32", consts: { WG } }],
  grid: (p, _v, gpu) => grid1d(Math.min(MAX_WORKGROUPS, Math.ceil(p.count4 / WG)), gpu),
};

/** Validated params; throws naming the bad field. */
export function splitkReduceParams(
  count: number,
  splits: number,
  accumulate: boolean,
): ParamValues<typeof params.fields> {
  if (!Number.isInteger(count) || count < 0 || count % 4) {
    throw new Error(`splitk_reduce: count = ${count} must be a multiple of 4`);
  }
  if (!Number.isInteger(splits) || splits < 1) {
    throw new Error(`splitk_reduce: splits = ${splits} must be an integer >= 1`);
  }
  return { count4: count / 4, splits, accumulate: accumulate ? 1 : 0 };
}

function reduceCase(
  count: number,
  splits: number,
  accumulate: boolean,
): KernelCase<typeof params.fields> {
  return {
    label: `count=${count} splits=${splits}${accumulate ? " out+=" : ""}`,
    params: splitkReduceParams(count, splits, accumulate),
    inputs: (rng) => ({
      part: rng.fillNormal(new Float32Array(splits * count)),
      ...(accumulate ? { out: rng.fillNormal(new Float32Array(count)) } : {}),
    }),
    outputs: accumulate ? {} : { out: count },
    reference: (inp) => {
      const part = inp.part as Float32Array;
      const out = accumulate ? new Float32Array(inp.out as Float32Array) : new Float32Array(count);
      for (let i = 0; i < count; i++) {
        let s = 0;
        for (let z = 0; z < splits; z++) s += part[z * count + i];
        out[i] += s;
      }
      return { out };
    },
    tolerance: () => ({ atol: 1e-5, rtol: 1e-5 }),
    bytes: () => (splits + (accumulate ? 2 : 1)) * count * 4,
    flops: splits * count,
  };
}

export const cases = [
  reduceCase(4, 1, false),
  reduceCase(1140, 3, true),
  reduceCase(64 * 5120, 8, false),
  reduceCase(64 * 2048, 16, true),
];
