/**
 * Queue writes held back while a step is encoded ahead of its submit.
 *
 * `queue.writeBuffer` takes effect in queue order at the moment it is called: a write made
 * while step N+1 is encoded, before step N is submitted, would land before step N's commands
 * and change the inputs they read. So where a model encodes a step before submitting the one
 * ahead of it, its writes (inputs, kernel params) are held here and made just before its own
 * submit. Every write through `writeBuffer` (src/gpu/buffers.ts) to a device with a hold open
 * is held; the bytes are copied when held, so the caller may reuse its arrays.
 *
 * ```ts
 * const [commands, writes] = holdWrites(device, () => encodeStep());
 * // ... submit the step ahead ...
 * makeWrites(device, writes);
 * device.queue.submit([commands]);
 * ```
 */

/** One write held back. */
export interface HeldWrite {
  readonly buffer: GPUBuffer;
  readonly offset: number;
  readonly bytes: Uint8Array<ArrayBuffer>;
}

const holds = new Map<GPUDevice, HeldWrite[]>();

/** Runs `body` with `device`'s writes held; returns its result and the writes, in order. */
export function holdWrites<T>(device: GPUDevice, body: () => T): [T, HeldWrite[]] {
  if (holds.has(device)) throw new Error("holdWrites: this device's writes are already held");
  const writes: HeldWrite[] = [];
  holds.set(device, writes);
  try {
    return [body(), writes];
  } finally {
    holds.delete(device);
  }
}

/**
 * Holds the write when `device` has a hold open (returns true); otherwise the caller writes
 * it at once (false). `bytes` is 4-byte aligned (writeBuffer's rule).
 */
export function holdWrite(
  device: GPUDevice,
  buffer: GPUBuffer,
  offset: number,
  bytes: Uint8Array,
): boolean {
  const held = holds.get(device);
  if (!held) return false;
  held.push({ buffer, offset, bytes: new Uint8Array(bytes) });
  return true;
}

/** Makes held writes, in the order they were held. */
export function makeWrites(device: GPUDevice, writes: readonly HeldWrite[]): void {
  for (const w of writes) device.queue.writeBuffer(w.buffer, w.offset, w.bytes);
}
