/**
 * The measured read-bandwidth roof of the perf tasks and `profile` (readRoof, roofLine): the
 * best of the read_bandwidth kernel's forms over one buffer larger than the caches (1 GiB; 64
 * MiB on a CPU adapter), or the figure given. Null without timestamp queries.
 *
 * ```ts
 * const roof = await readRoof(gpu); // { bytesPerSecond, variant } | null
 * ```
 */
import type { Gpu } from "../gpu/device.ts";
import { measureReadBandwidth } from "../../kernels/read_bandwidth.ts";

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
