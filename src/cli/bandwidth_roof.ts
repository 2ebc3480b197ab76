/**
 * The measured read-bandwidth roof for `profile` (readBandwidthGbps), and for the perf tasks
 * (readRoof, roofLine): the read_bandwidth kernel (f32 variant)
 * over one buffer larger than the caches, median of timed dispatches, in GB/s. Null
 * without timestamp queries.
 *
 * ```ts
 * const gbps = await readBandwidthGbps(gpu, 2 ** 30, 10);
 * ```
 */
import type { Gpu } from "../gpu/device.ts";
import { BufferUsage } from "../gpu/device.ts";
import { createStorage, uploadBuffer } from "../gpu/buffers.ts";
import { PassTimer } from "../gpu/timestamps.ts";
import { getPipeline, makeBindGroup, variantByName } from "../../kernels/kernel.ts";
import { measureReadBandwidth, spec } from "../../kernels/read_bandwidth.ts";
import { upperMedian } from "../util/sample_stats.ts";

/** GB/s reading `bytes` (capped at the binding limit), median of `reps` dispatches. */
export async function readBandwidthGbps(
  gpu: Gpu,
  bytes: number,
  reps: number,
): Promise<number | null> {
  if (!gpu.timestamps) return null;
  const d = gpu.device;
  const n4 = Math.floor(Math.min(bytes, gpu.limits.maxStorageBufferBindingSize) / 16);
  const groups = 1024;
  const x = createStorage(d, "bandwidth.x", n4 * 16);
  const partial = createStorage(d, "bandwidth.partial", groups * 4);
  const params = uploadBuffer(
    d,
    "bandwidth.params",
    spec.params.pack({ n4, groups }),
    BufferUsage.UNIFORM | BufferUsage.COPY_DST,
  );
  const pipe = await getPipeline(gpu, spec, variantByName(spec, "f32"));
  const bind = makeBindGroup(gpu, pipe, params, { x, partial });
  const timer = new PassTimer(gpu, reps + 1);
  const enc = d.createCommandEncoder();
  for (let r = 0; r <= reps; r++) {
    const pass = enc.beginComputePass({ timestampWrites: timer.next("read_bandwidth") });
    pass.setPipeline(pipe.pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(groups, 1, 1);
    pass.end();
  }
  timer.resolve(enc);
  d.queue.submit([enc.finish()]);
  const us = (await timer.read()).slice(1).map((s) => s.us);
  timer.destroy();
  x.destroy();
  partial.destroy();
  params.destroy();
  const mid = upperMedian(us);
  return mid > 0 ? (n4 * 16) / (mid * 1e-6) / 1e9 : null;
}

/**
 * The read roof of a perf task: `givenGbps` when given, else measured by the read_bandwidth
 * kernel over 1 GiB (64 MiB on a CPU adapter); null without timestamp queries.
 */
export async function readRoof(
  gpu: Gpu,
  givenGbps?: number,
): Promise<{ bytesPerSecond: number; variant: string } | null> {
  if (givenGbps) return { bytesPerSecond: givenGbps * 1e9, variant: "given" };
  return await measureReadBandwidth(gpu, gpu.adapter.type === "cpu" ? 64 * 2 ** 20 : 2 ** 30);
}

/** The line a perf task prints about its roof. */
export function roofLine(roof: { bytesPerSecond: number; variant: string } | null): string {
  return roof
    ? `read bandwidth: ${(roof.bytesPerSecond / 1e9).toFixed(1)} GB/s (${roof.variant})`
    : "read bandwidth: unknown (no timestamp queries; pass --bandwidth-gbps for a roof)";
}
