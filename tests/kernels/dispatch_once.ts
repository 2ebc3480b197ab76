/**
 * Test helper: runs one kernel variant once on given host arrays and reads named outputs
 * back (as raw bytes), for tests whose expectations a case table cannot state.
 */
import { readBuffer, uploadBuffer } from "../../src/gpu/buffers.ts";
import { BufferUsage, type Gpu } from "../../src/gpu/device.ts";
import { f32ToF16Bits } from "../../src/util/f16.ts";
import {
  getPipeline,
  type KernelSpec,
  makeBindGroup,
  variantByName,
} from "../../kernels/kernel.ts";
import type { ParamFields, ParamValues } from "../../kernels/params.ts";

/** Inputs by binding name; `outputs` gives the byte size of each binding the kernel writes. */
export async function dispatchOnce<F extends ParamFields>(
  gpu: Gpu,
  spec: KernelSpec<F>,
  variantName: string,
  params: ParamValues<F>,
  inputs: Record<string, Float32Array | Int32Array | Uint32Array>,
  outputs: Record<string, number>,
): Promise<Record<string, ArrayBuffer>> {
  const d = gpu.device;
  const variant = variantByName(spec, variantName);
  const pipe = await getPipeline(gpu, spec, variant);
  const buffers: Record<string, GPUBuffer> = {};
  for (const b of spec.bindings) {
    const data = inputs[b.name];
    if (data) {
      const half = variant.dtype === "f16" && /\bT\b/.test(b.type) && data instanceof Float32Array;
      buffers[b.name] = uploadBuffer(d, b.name, half ? f32ToF16Bits(data) : data);
    } else if (outputs[b.name] !== undefined) {
      buffers[b.name] = uploadBuffer(d, b.name, new Uint8Array(outputs[b.name]).fill(0xff));
    } else {
      throw new Error(`dispatchOnce ${spec.name}: binding '${b.name}' not given`);
    }
  }
  const p = uploadBuffer(
    d,
    "params",
    spec.params.pack(params),
    BufferUsage.UNIFORM | BufferUsage.COPY_DST,
  );
  const enc = d.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.setPipeline(pipe.pipeline);
  pass.setBindGroup(0, makeBindGroup(gpu, pipe, p, buffers));
  pass.dispatchWorkgroups(...spec.grid(params, variant, gpu));
  pass.end();
  d.queue.submit([enc.finish()]);
  const out: Record<string, ArrayBuffer> = {};
  for (const [name, bytes] of Object.entries(outputs)) {
    out[name] = await readBuffer(d, buffers[name], bytes);
  }
  for (const b of [...Object.values(buffers), p]) b.destroy();
  return out;
}
