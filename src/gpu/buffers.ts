/**
 * Buffer creation, upload and read-back. Storage buffers are padded to 4 bytes (WebGPU
 * copy rule) and labelled, so validation errors name them.
 *
 * ```ts
 * const x = uploadBuffer(gpu.device, "x", new Float32Array([1, 2, 3]));
 * const back = new Float32Array(await readBuffer(gpu.device, x, 12));
 * ```
 */
import { paced } from "./event_pacing.ts";
import { BufferUsage, MapMode } from "./device.ts";
import { holdWrite } from "./held_writes.ts";

/** Usage of a buffer that kernels read and write and that may be copied either way. */
export const STORAGE_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

/** Rounds a byte size up to a multiple of `to`. */
export function alignTo(bytes: number, to = 4): number {
  return Math.ceil(bytes / to) * to;
}

/** A storage buffer of at least `bytes` bytes (never zero-sized). */
export function createStorage(
  device: GPUDevice,
  label: string,
  bytes: number,
  usage: number = STORAGE_USAGE,
): GPUBuffer {
  return device.createBuffer({ label, size: Math.max(16, alignTo(bytes, 16)), usage });
}

/** A storage buffer holding `data`. */
export function uploadBuffer(
  device: GPUDevice,
  label: string,
  data: ArrayBufferView,
  usage: number = STORAGE_USAGE,
): GPUBuffer {
  const buffer = createStorage(device, label, data.byteLength, usage);
  writeBuffer(device, buffer, 0, data);
  return buffer;
}

/**
 * queue.writeBuffer with the 4-byte size rule handled (pads a copy when needed); held
 * instead while the device's writes are held (src/gpu/held_writes.ts).
 */
export function writeBuffer(
  device: GPUDevice,
  buffer: GPUBuffer,
  offset: number,
  data: ArrayBufferView,
): void {
  if (data.byteLength === 0) return;
  let bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (bytes.byteLength % 4) {
    const padded = new Uint8Array(alignTo(bytes.byteLength));
    padded.set(bytes);
    bytes = padded;
  }
  if (holdWrite(device, buffer, offset, bytes)) return;
  device.queue.writeBuffer(buffer, offset, bytes as Uint8Array<ArrayBuffer>);
}

/** Copies `bytes` from `buffer` (at `offset`) into a fresh ArrayBuffer. */
export async function readBuffer(
  device: GPUDevice,
  buffer: GPUBuffer,
  bytes: number,
  offset = 0,
): Promise<ArrayBuffer> {
  const size = alignTo(bytes);
  const staging = device.createBuffer({
    label: `readback ${buffer.label}`,
    size,
    usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
  });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, offset, staging, 0, size);
  device.queue.submit([encoder.finish()]);
  await paced(staging.mapAsync(MapMode.READ));
  const out = staging.getMappedRange().slice(0, bytes);
  staging.unmap();
  staging.destroy();
  return out;
}
