/**
 * Test helper: one kernel dispatch on the shared device, params uploaded into a fresh
 * uniform buffer, and typed read-back of a T buffer (f16 or f32) as f32.
 */
import type { Gpu } from "../../src/gpu/device.ts";
import { BufferUsage } from "../../src/gpu/device.ts";
import { readBuffer, uploadBuffer } from "../../src/gpu/buffers.ts";
import { f16BitsToF32, f32ToF16Bits } from "../../src/util/f16.ts";
import {
  getPipeline,
  type KernelSpec,
  makeBindGroup,
  variantByName,
} from "../../kernels/kernel.ts";
import type { ParamFields, ParamValues } from "../../kernels/params.ts";

/** Encodes and submits one dispatch of `spec`'s variant `variant`. */
export async function dispatch<F extends ParamFields>(
  gpu: Gpu,
  spec: KernelSpec<F>,
  variant: string,
  params: ParamValues<F>,
  buffers: Record<string, GPUBuffer>,
): Promise<void> {
  const pipe = await getPipeline(gpu, spec, variantByName(spec, variant));
  const paramsBuffer = uploadBuffer(
    gpu.device,
    `${spec.name}.params`,
    spec.params.pack(params),
    BufferUsage.UNIFORM | BufferUsage.COPY_DST,
  );
  const encoder = gpu.device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipe.pipeline);
  pass.setBindGroup(0, makeBindGroup(gpu, pipe, paramsBuffer, buffers));
  pass.dispatchWorkgroups(...spec.grid(params, pipe.variant, gpu));
  pass.end();
  gpu.device.queue.submit([encoder.finish()]);
}

/** A storage buffer holding `data` in the storage type (f16 bits when `half`). */
export function uploadT(gpu: Gpu, label: string, data: Float32Array, half: boolean): GPUBuffer {
  return uploadBuffer(gpu.device, label, half ? f32ToF16Bits(data) : data);
}

/** Reads `count` elements of a T buffer back as f32. */
export async function readT(
  gpu: Gpu,
  buffer: GPUBuffer,
  count: number,
  half: boolean,
): Promise<Float32Array> {
  const raw = await readBuffer(gpu.device, buffer, count * (half ? 2 : 4));
  return half ? f16BitsToF32(new Uint16Array(raw)) : new Float32Array(raw);
}

/** Reads `count` f32 back. */
export async function readF32(gpu: Gpu, buffer: GPUBuffer, count: number): Promise<Float32Array> {
  return new Float32Array(await readBuffer(gpu.device, buffer, count * 4));
}

/** Largest |a - b| (NaN when either holds a NaN). */
export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`lengths ${a.length} != ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = Number.isNaN(d) ? NaN : d;
    if (Number.isNaN(m)) return NaN;
  }
  return m;
}
