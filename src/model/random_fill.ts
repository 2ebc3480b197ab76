/**
 * Deterministic random values drawn on the GPU into a buffer (the fill_random kernel), in
 * dispatches of at most FILL_CHUNK values: synthetic weights, and perf-attention's KV caches.
 *
 * ```ts
 * const fill = await KernelCall.create(gpu, fillRandom.spec, ["f16"]);
 * submitRandomFill(gpu, fill, "f16", buffer, { offset: 0, count, seed: 1, base: 0, scale: 1 });
 * await paced(gpu.device.queue.onSubmittedWorkDone());
 * ```
 */
import type { Gpu } from "../gpu/device.ts";
import type * as fillRandom from "../../kernels/fill_random.ts";
import type { ParamValues } from "../../kernels/params.ts";
import type { KernelCall } from "./kernel_call.ts";
import type { BufferArg } from "../../kernels/kernel.ts";

type FillFields = typeof fillRandom.spec.params.fields;

/** Most values one dispatch fills (u32 offsets, within the 1-D grid's limits). */
export const FILL_CHUNK = 1 << 26;

/**
 * Submits fill_random over `out[v.offset, v.offset + v.count)` (`out` a buffer, or a range of
 * one: the offset counts from its start): one dispatch and one submit a chunk, each behind its
 * own params write (queue order keeps them apart). Returns at once.
 */
export function submitRandomFill(
  gpu: Gpu,
  fill: KernelCall<FillFields>,
  dtype: "f16" | "f32",
  out: BufferArg,
  v: ParamValues<FillFields>,
): void {
  fill.forget(); // its bind group names `out`
  for (let done = 0; done < v.count; done += FILL_CHUNK) {
    fill.setParams({ ...v, offset: v.offset + done, count: Math.min(FILL_CHUNK, v.count - done) });
    const enc = gpu.device.createCommandEncoder();
    const pass = enc.beginComputePass({ label: "fill_random" });
    fill.dispatch(pass, dtype, "out", { out });
    pass.end();
    gpu.device.queue.submit([enc.finish()]);
  }
}
