/**
 * Read-bandwidth probe: a grid-stride vec4 sum over one large buffer. Its GB/s is the
 * "measured read bandwidth" that roofline figures divide by.
 */
import type { KernelCase } from "./case.ts";
import type { KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({ n4: "u32", groups: "u32" });
const WG = 256;

export const spec: KernelSpec<typeof params.fields> = {
  name: "read_bandwidth",
  shader: "read_bandwidth.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[n4]" },
    { name: "partial", type: "f32", access: "read_write", shape: "[groups]" },
  ],
  variants: [{ name: "f32", dtype: "f32", consts: { WG } }],
  grid: (p) => [p.groups, 1, 1],
};

/** CPU reference: the same grid-stride partition, f64 sums. */
export function readBandwidthRef(x: Float32Array, groups: number): Float32Array {
  const n4 = x.length / 4;
  const out = new Float64Array(groups);
  const stride = groups * WG;
  for (let g = 0; g < stride; g++) {
    for (let i = g; i < n4; i += stride) {
      out[Math.floor(g / WG)] += x[4 * i] + x[4 * i + 1] + x[4 * i + 2] + x[4 * i + 3];
    }
  }
  return Float32Array.from(out);
}

function bwCase(n4: number, groups: number): KernelCase<typeof params.fields> {
  return {
    label: `bytes=${n4 * 16} groups=${groups}`,
    params: { n4, groups },
    inputs: (rng) => ({ x: rng.fillUniform(new Float32Array(n4 * 4), -1, 1) }),
    outputs: { partial: groups },
    reference: (inp) => ({ partial: readBandwidthRef(inp.x as Float32Array, groups) }),
    tolerance: () => ({ atol: 1e-3, rtol: 1e-4 }),
    bytes: () => n4 * 16,
    flops: n4 * 4,
  };
}

/** The large case is the bandwidth figure: 1 GiB on GPUs (the software driver skips it). */
export const cases = [bwCase(1001, 3), bwCase(65_537, 33), bwCase(64 * 2 ** 20, 132 * 16)];
