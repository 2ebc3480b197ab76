/**
 * GPU memory for many long-lived storage buffers of known sizes (the weights, the KV cache),
 * taken either a buffer each or as ranges of a few large arena buffers. Every range is bound
 * as a GPUBufferBinding (buffer, offset, size), so the kernels see the same thing either way.
 * Arenas hold at most ARENA_MAX bytes (and no more than the adapter's largest buffer), ranges
 * of ARENA_BIG bytes and more start on ARENA_BIG (a 2 MiB page each), smaller ones on 256.
 *
 * ```ts
 * const { ranges, buffers } = await allocateRanges(gpu, [{ label: "a", size: 1 << 20 }], "arena",
 *   (label, size, before) => new Error(`out of memory at ${label}`));
 * pass.setBindGroup(0, device.createBindGroup({ layout, entries: [{ binding: 0, resource: ranges[0] }] }));
 * ```
 */
import type { Gpu } from "./device.ts";
import { STORAGE_USAGE } from "./buffers.ts";

/** A range of a buffer, bound as it is. */
export interface BufferRange {
  readonly buffer: GPUBuffer;
  readonly offset: number;
  readonly size: number;
}

/**
 * "each": a buffer a range (offset 0); "arena": ranges of as few arenas as ARENA_MAX and the
 * adapter allow, in request order.
 */
export type Placement = "each" | "arena";

/** The placements, for option checks. */
export const PLACEMENTS: readonly Placement[] = ["each", "arena"];

/**
 * Most bytes an arena takes: past a few GiB the question arenas ask (do larger allocations
 * read faster cold?) is asked either way, and one allocation of everything would lean on the
 * driver's largest allocation more than webfpm needs to.
 */
export const ARENA_MAX = 16 * 2 ** 30;
/** Ranges of this many bytes and more start on a multiple of it in an arena (a 2 MiB page). */
export const ARENA_BIG = 2 * 2 ** 20;
/** Where smaller ranges start (at least any adapter's storage offset alignment). */
const ARENA_SMALL = 256;

/**
 * Allocates `requests` (each size a multiple of 4, at most the binding limit) as `placement`
 * says. Out of memory: frees what it took and throws `outOfMemory(label, size, bytesBefore)`
 * for the buffer that failed (a request's label, or `arena N`).
 */
export async function allocateRanges(
  gpu: Gpu,
  requests: readonly { readonly label: string; readonly size: number }[],
  placement: Placement,
  outOfMemory: (label: string, size: number, bytesBefore: number) => Error,
  arenaLabel = "arena",
): Promise<{ ranges: BufferRange[]; buffers: GPUBuffer[]; bytes: number }> {
  const buffers: GPUBuffer[] = [];
  let bytes = 0;
  const allocate = async (label: string, size: number): Promise<GPUBuffer> => {
    gpu.device.pushErrorScope("out-of-memory");
    const buffer = gpu.device.createBuffer({ label, size, usage: STORAGE_USAGE });
    const oom = await gpu.device.popErrorScope();
    if (oom) {
      for (const b of buffers) b.destroy();
      throw outOfMemory(label, size, bytes);
    }
    buffers.push(buffer);
    bytes += size;
    return buffer;
  };
  if (placement === "each") {
    const ranges: BufferRange[] = [];
    for (const r of requests) {
      ranges.push({ buffer: await allocate(r.label, r.size), offset: 0, size: r.size });
    }
    return { ranges, buffers, bytes };
  }
  // arenas: consecutive requests while they fit
  const most = Math.min(gpu.limits.maxBufferSize, ARENA_MAX);
  const offsets: number[] = [];
  const arenaOf: number[] = [];
  const arenaSizes: number[] = [0];
  for (const { size } of requests) {
    const align = size >= ARENA_BIG ? ARENA_BIG : ARENA_SMALL;
    let offset = Math.ceil(arenaSizes[arenaSizes.length - 1] / align) * align;
    if (offset + size > most && offset > 0) {
      arenaSizes.push(0);
      offset = 0;
    }
    offsets.push(offset);
    arenaOf.push(arenaSizes.length - 1);
    arenaSizes[arenaSizes.length - 1] = offset + size;
  }
  const arenas: GPUBuffer[] = [];
  for (let a = 0; a < arenaSizes.length; a++) {
    arenas.push(await allocate(`${arenaLabel} ${a}`, arenaSizes[a]));
  }
  const ranges = requests.map(({ size }, i) => ({
    buffer: arenas[arenaOf[i]],
    offset: offsets[i],
    size,
  }));
  return { ranges, buffers, bytes };
}
