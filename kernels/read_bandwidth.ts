/**
 * Read-bandwidth probe: a grid-stride vec4 sum over one large buffer. Its GB/s is the
 * "measured read bandwidth" that roofline figures divide by.
 */
import type { KernelCase } from "./case.ts";
import type { KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";
import type { Gpu } from "../src/gpu/device.ts";
import { BufferUsage } from "../src/gpu/device.ts";
import { createStorage, writeBuffer } from "../src/gpu/buffers.ts";
import { PassTimer } from "../src/gpu/timestamps.ts";
import { getPipeline, makeBindGroup } from "./kernel.ts";

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
  variants: [
    { name: "f32", dtype: "f32", consts: { WG } },
    {
      name: "f32-x4",
      dtype: "f32",
      shader: "read_bandwidth_unrolled.wgsl",
      consts: { WG, UNROLL: 4 },
    },
    {
      name: "f32-x8",
      dtype: "f32",
      shader: "read_bandwidth_unrolled.wgsl",
      consts: { WG, UNROLL: 8 },
    },
  ],
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

/**
 * Measures the adapter's read bandwidth in bytes/s: every variant over a buffer of
 * `bytes` (1 GiB by default; must exceed the caches), median of `reps` timed dispatches,
 * best variant. Null without timestamp queries.
 */
export async function measureReadBandwidth(
  gpu: Gpu,
  bytes = 2 ** 30,
  reps = 10,
): Promise<{ bytesPerSecond: number; variant: string; bytes: number } | null> {
  if (!gpu.timestamps) return null;
  const n4 = Math.floor(Math.min(bytes, gpu.limits.maxStorageBufferBindingSize) / 16);
  const d = gpu.device;
  const x = createStorage(d, "bandwidth.x", n4 * 16);
  const partialBuf = createStorage(d, "bandwidth.partial", 132 * 64 * 4);
  const params = d.createBuffer({
    size: spec.params.size,
    usage: BufferUsage.UNIFORM | BufferUsage.COPY_DST,
  });
  let best: { bytesPerSecond: number; variant: string; bytes: number } | null = null;
  for (const groups of [1056, 2112, 4224, 8448]) {
    writeBuffer(d, params, 0, spec.params.pack({ n4, groups }));
    for (const variant of spec.variants) {
      const pipe = await getPipeline(gpu, spec, variant);
      const bind = makeBindGroup(gpu, pipe, params, { x, partial: partialBuf });
      const timer = new PassTimer(gpu, reps + 1);
      const enc = d.createCommandEncoder();
      for (let r = 0; r <= reps; r++) {
        const pass = enc.beginComputePass({ timestampWrites: timer.next("bw") });
        pass.setPipeline(pipe.pipeline);
        pass.setBindGroup(0, bind);
        pass.dispatchWorkgroups(Math.min(groups, 132 * 64), 1, 1);
        pass.end();
      }
      timer.resolve(enc);
      d.queue.submit([enc.finish()]);
      const us = (await timer.read()).slice(1).map((s) => s.us).sort((a, b) => a - b);
      timer.destroy();
      const median = us[Math.floor(us.length / 2)];
      const rate = (n4 * 16) / (median * 1e-6);
      if (!best || rate > best.bytesPerSecond) {
        best = { bytesPerSecond: rate, variant: `${variant.name} x${groups}`, bytes: n4 * 16 };
      }
    }
  }
  x.destroy();
  partialBuf.destroy();
  params.destroy();
  return best;
}

/** The large case is the bandwidth figure: 1 GiB on GPUs (the software driver skips it). */
export const cases = [
  bwCase(1001, 3),
  bwCase(9_999, 7),
  bwCase(65_537, 33),
  bwCase(64 * 2 ** 20, 132 * 16),
];
