/**
 * GPU time from timestamp queries: a pool of query pairs, one pair per timed compute pass,
 * resolved in one copy and read back as microseconds per pass.
 *
 * ```ts
 * const timer = new PassTimer(gpu, 64);
 * const pass = encoder.beginComputePass({ timestampWrites: timer.next("rmsnorm") });
 * // ...dispatch, pass.end()...
 * timer.resolve(encoder);
 * device.queue.submit([encoder.finish()]);
 * const spans = await timer.read(); // [{ label: "rmsnorm", us: 12.5 }]
 * ```
 */
import type { Gpu } from "./device.ts";
import { BufferUsage, MapMode } from "./device.ts";
import { paced } from "./event_pacing.ts";

/** One timed pass. */
export interface PassSpan {
  readonly label: string;
  readonly us: number;
  /** Start of the pass relative to the first pass resolved in the same batch, in µs. */
  readonly startUs: number;
}

/** Most passes one PassTimer times: WebGPU's query sets hold at most 4096 queries, two a pass. */
export const MAX_TIMED_PASSES = 2048;

/** Timestamp query pairs for up to `capacity` passes per resolve. */
export class PassTimer {
  private readonly querySet: GPUQuerySet | null;
  private readonly resolveBuffer: GPUBuffer | null;
  private readonly readBuffers: GPUBuffer[] = [];
  private labels: string[] = [];

  constructor(private readonly gpu: Gpu, readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1 || capacity > MAX_TIMED_PASSES) {
      throw new Error(
        `PassTimer: capacity ${capacity} must be an integer in 1..${MAX_TIMED_PASSES}`,
      );
    }
    if (!gpu.timestamps) {
      this.querySet = null;
      this.resolveBuffer = null;
      return;
    }
    this.querySet = gpu.device.createQuerySet({ type: "timestamp", count: capacity * 2 });
    this.resolveBuffer = gpu.device.createBuffer({
      label: "timestamps resolve",
      size: capacity * 16,
      usage: BufferUsage.QUERY_RESOLVE | BufferUsage.COPY_SRC,
    });
  }

  /** True when the adapter has timestamp queries. */
  get enabled(): boolean {
    return this.querySet !== null;
  }

  /** Number of passes recorded since the last resolve. */
  get count(): number {
    return this.labels.length;
  }

  /**
   * timestampWrites for the next pass, or undefined when timing is unavailable. Throws when
   * the timer is full: a pass left untimed would be missing from the GPU time, unsaid.
   */
  next(label: string): GPUComputePassTimestampWrites | undefined {
    if (!this.querySet) return undefined;
    if (this.labels.length >= this.capacity) {
      throw new Error(
        `PassTimer: more than ${this.capacity} passes between resolves (pass "${label}")`,
      );
    }
    const i = this.labels.length;
    this.labels.push(label);
    return {
      querySet: this.querySet,
      beginningOfPassWriteIndex: 2 * i,
      endOfPassWriteIndex: 2 * i + 1,
    };
  }

  /** Resolves the recorded queries into a mappable buffer (encode before submit). */
  resolve(encoder: GPUCommandEncoder): void {
    if (!this.querySet || !this.resolveBuffer || this.labels.length === 0) {
      this.labels = [];
      return;
    }
    const n = this.labels.length;
    encoder.resolveQuerySet(this.querySet, 0, 2 * n, this.resolveBuffer, 0);
    const read = this.readBuffers.pop() ?? this.gpu.device.createBuffer({
      label: "timestamps read",
      size: this.capacity * 16,
      usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
    });
    encoder.copyBufferToBuffer(this.resolveBuffer, 0, read, 0, n * 16);
    this.pending.push({ read, labels: this.labels });
    this.labels = [];
  }

  private pending: { read: GPUBuffer; labels: string[] }[] = [];

  /** Reads the oldest resolved batch (after its submit). Empty when timing is unavailable. */
  async read(): Promise<PassSpan[]> {
    const batch = this.pending.shift();
    if (!batch) return [];
    await paced(batch.read.mapAsync(MapMode.READ));
    const ticks = new BigUint64Array(
      batch.read.getMappedRange().slice(0, batch.labels.length * 16),
    );
    batch.read.unmap();
    // a timer destroyed while this read waited frees the buffer instead of pooling it
    if (this.destroyed) batch.read.destroy();
    else this.readBuffers.push(batch.read);
    const t0 = ticks[0];
    return batch.labels.map((label, i) => ({
      label,
      us: Number(ticks[2 * i + 1] - ticks[2 * i]) / 1000,
      startUs: Number(ticks[2 * i] - t0) / 1000,
    }));
  }

  private destroyed = false;

  /** Frees the GPU objects (a read in flight frees its own buffer when it ends). */
  destroy(): void {
    this.destroyed = true;
    this.querySet?.destroy();
    this.resolveBuffer?.destroy();
    for (const b of this.readBuffers) b.destroy();
    for (const b of this.pending) b.read.destroy();
  }
}

/**
 * Keeps the GPU busy with passes that `encode` fills, two in flight, until `ms` have passed
 * (at least one pass); returns how many ran. Before a timed pass: a GPU that sat idle (a fresh
 * machine, or the seconds a CPU reference takes) runs its first passes at lower clocks, and on
 * the H200 the first rows of a perf-attention or perf-linear sweep read up to 2-4x slow.
 */
export async function warmComputePasses(
  gpu: Gpu,
  label: string,
  encode: (pass: GPUComputePassEncoder) => void,
  ms: number,
): Promise<number> {
  const end = performance.now() + ms;
  let previous: Promise<unknown> | null = null;
  let passes = 0;
  do {
    const enc = gpu.device.createCommandEncoder();
    const pass = enc.beginComputePass({ label });
    encode(pass);
    pass.end();
    gpu.device.queue.submit([enc.finish()]);
    const done = paced(gpu.device.queue.onSubmittedWorkDone());
    if (previous) await previous;
    previous = done;
    passes++;
  } while (performance.now() < end);
  await previous;
  return passes;
}

/**
 * µs of one compute pass that `encode` fills: from its timestamps, or without a timer (or
 * timestamp queries) host wall from submit to onSubmittedWorkDone.
 */
export async function timeComputePass(
  gpu: Gpu,
  timer: PassTimer | null,
  label: string,
  encode: (pass: GPUComputePassEncoder) => void,
): Promise<number> {
  const enc = gpu.device.createCommandEncoder();
  const pass = enc.beginComputePass({ label, timestampWrites: timer?.next(label) });
  encode(pass);
  pass.end();
  timer?.resolve(enc);
  const t0 = performance.now();
  gpu.device.queue.submit([enc.finish()]);
  if (timer?.enabled) return (await timer.read())[0].us;
  await paced(gpu.device.queue.onSubmittedWorkDone());
  return (performance.now() - t0) * 1000;
}
