/**
 * Runs one kernel case on one variant: uploads inputs (rounded to the variant's storage
 * type, so the CPU reference sees what the GPU sees), dispatches with timestamp queries,
 * reads the outputs back and compares them with the reference.
 *
 * ```ts
 * const row = await validateCase(gpu, rmsnorm, rmsnorm.cases[0], variantByName(rmsnorm.spec, "f16"));
 * row.pass; row.maxAbs; row.gpuUs;
 * ```
 */
import type { Gpu } from "../src/gpu/device.ts";
import { tileExpertMatrices } from "./expert_tiles.ts";
import { readBuffer, uploadBuffer } from "../src/gpu/buffers.ts";
import { PassTimer } from "../src/gpu/timestamps.ts";
import { BufferUsage } from "../src/gpu/device.ts";
import { f16BitsToF32, f32ToF16Bits } from "../src/util/f16.ts";
import { caseInputs, fingerprint, inputsKind, referenceKey, storesT } from "./case_inputs.ts";
import type { ParamFields } from "./params.ts";
import type { HostArray, KernelCase, KernelModule } from "./case.ts";
import { getPipeline, makeBindGroup, type Variant } from "./kernel.ts";

/** One row of the validation table. */
export interface ValidationRow {
  readonly kernel: string;
  readonly case: string;
  readonly variant: string;
  readonly maxAbs: number;
  /** max |gpu - ref| / max |ref|. */
  readonly maxRel: number;
  readonly atol: number;
  readonly rtol: number;
  readonly pass: boolean;
  /** Elements outside tolerance (NaN counts), and the first one. */
  readonly bad: number;
  readonly firstBad?: string;
  /** Median GPU time of one dispatch in µs, null without timestamp queries. */
  readonly gpuUs: number | null;
  readonly gbps: number | null;
  readonly tflops: number | null;
  readonly bytes: number;
  readonly flops: number;
}

/**
 * CPU references of the current kernel's cases, by case and storage type: the variants of one
 * dtype (f16, f16-sg, f16-staged, ...) see the same inputs, and production-shaped references
 * take seconds in plain TypeScript. An entry is reused only when the inputs' fingerprint
 * matches; another kernel's case clears the cache.
 */
const referenceCache = new Map<
  string,
  { kernel: string; fingerprint: string; expected: Record<string, HostArray> }
>();

/** References computed elsewhere (a worker pool), by kernel, case label and inputs kind (inputsKind). */
export interface ReferenceSource {
  /** The reference and the fingerprint of the inputs it was computed from, if requested. */
  take(
    kernel: string,
    label: string,
    kind: string,
  ): Promise<{ fingerprint: string; expected: Record<string, HostArray> }> | undefined;
}

async function cachedReference<F extends ParamFields>(
  kernel: string,
  kcase: KernelCase<F>,
  inputs: Record<string, HostArray>,
  variant: Variant,
  source?: ReferenceSource,
): Promise<Record<string, HostArray>> {
  const key = referenceKey(kernel, kcase.label, inputsKind(variant));
  const print = fingerprint(inputs);
  const hit = referenceCache.get(key);
  if (hit && hit.fingerprint === print) return hit.expected;
  for (const [k, entry] of referenceCache) {
    if (entry.kernel !== kernel) referenceCache.delete(k);
  }
  const far = await source?.take(kernel, kcase.label, inputsKind(variant));
  // A worker's reference counts only when it saw the same inputs.
  const expected = far && far.fingerprint === print
    ? far.expected
    : kcase.reference(inputs, variant);
  referenceCache.set(key, { kernel, fingerprint: print, expected });
  return expected;
}

/**
 * f16 bits of shared inputs, by array: the variants of one case share its inputs (InputCache),
 * and converting a production-shaped MoE weight tensor (400M values) took seconds a row.
 */
const f16Bits = new WeakMap<Float32Array, Uint16Array>();

function f16Of(data: Float32Array): Uint16Array {
  let bits = f16Bits.get(data);
  if (!bits) f16Bits.set(data, bits = f32ToF16Bits(data));
  return bits;
}

/**
 * The expert weights of shared inputs in tiles (the -t16 forms), by array (of f16 bits where
 * the forms store f16): several forms of a case share them.
 */
const tiled = new WeakMap<object, Uint16Array | Float32Array>();

function tiledOf(
  data: HostArray | Uint16Array,
  rows: number,
  cols: number,
): Uint16Array | Float32Array {
  if (!(data instanceof Uint16Array || data instanceof Float32Array)) {
    throw new Error("expert weights in tiles: the weights are not f16 bits or f32 values");
  }
  let t = tiled.get(data);
  if (!t) tiled.set(data, t = tileExpertMatrices(data, rows, cols));
  return t;
}

/** How validateCase times a case, and what it may reuse. */
export interface ValidateOptions {
  /** Timed dispatches (median reported); 0: no timing. Default 5. */
  readonly reps?: number;
  /** The case's reference computed ahead (see reference_pool.ts). */
  readonly references?: ReferenceSource;
  /** The case's inputs as caseInputs draws them for this variant's inputs kind (see InputCache). */
  readonly inputs?: Record<string, HostArray>;
}

/** Validates and times one case on one variant. */
export async function validateCase<F extends ParamFields>(
  gpu: Gpu,
  module: KernelModule<F>,
  kcase: KernelCase<F>,
  variant: Variant,
  options: ValidateOptions = {},
): Promise<ValidationRow> {
  const { reps = 5, references } = options;
  const { spec } = module;
  const device = gpu.device;
  const pipe = await getPipeline(gpu, spec, variant);
  const inputs = options.inputs ?? caseInputs(module, kcase, variant);
  const half = variant.dtype === "f16";

  const buffers: Record<string, GPUBuffer> = {};
  const created: GPUBuffer[] = [];
  const ew = spec.expertWeights;
  for (const b of spec.bindings) {
    const data = inputs[b.name];
    if (data) {
      let upload: HostArray | Uint16Array =
        half && storesT(b, variant) && data instanceof Float32Array ? f16Of(data) : data;
      if (variant.expertTiles && ew?.binding === b.name) {
        upload = tiledOf(upload, ew.rows(kcase.params), ew.cols(kcase.params));
      }
      buffers[b.name] = uploadBuffer(device, `${spec.name}.${b.name}`, upload);
    } else if (kcase.outputs[b.name] !== undefined) {
      const bytes = kcase.outputs[b.name] * (half && storesT(b, variant) ? 2 : 4);
      const poison = new Uint8Array(Math.max(4, Math.ceil(bytes / 4) * 4)).fill(0xff);
      buffers[b.name] = uploadBuffer(device, `${spec.name}.${b.name}`, poison);
    } else {
      throw new Error(
        `${spec.name} case ${kcase.label}: binding '${b.name}' has no input or output`,
      );
    }
    created.push(buffers[b.name]);
  }
  const paramsBuffer = uploadBuffer(
    device,
    `${spec.name}.params`,
    spec.params.pack(kcase.params),
    BufferUsage.UNIFORM | BufferUsage.COPY_DST,
  );
  created.push(paramsBuffer);
  const bindGroup = makeBindGroup(gpu, pipe, paramsBuffer, buffers);
  const grid = spec.grid(kcase.params, variant, gpu);

  // The first dispatch produces the compared outputs; timing runs afterwards so that
  // kernels that update in place are compared after exactly one application.
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipe.pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(...grid);
  pass.end();
  device.queue.submit([encoder.finish()]);

  const expected = await cachedReference(spec.name, kcase, inputs, variant, references);
  const caseTol = kcase.tolerance(variant);
  const bindingTols = kcase.bindingTolerances?.(variant) ?? {};
  let maxAbs = 0, maxRef = 0, bad = 0;
  let firstBad: string | undefined;
  for (const [name, want] of Object.entries(expected)) {
    const binding = spec.bindings.find((b) => b.name === name);
    if (!binding) throw new Error(`${spec.name}: reference names unknown binding '${name}'`);
    const tol = bindingTols[name] ?? caseTol;
    const raw = await readBuffer(
      device,
      buffers[name],
      want.length * (half && storesT(binding, variant) ? 2 : 4),
    );
    const got: HostArray = half && storesT(binding, variant)
      ? f16BitsToF32(new Uint16Array(raw))
      : want instanceof Int32Array
      ? new Int32Array(raw)
      : want instanceof Uint32Array
      ? new Uint32Array(raw)
      : new Float32Array(raw);
    for (let i = 0; i < want.length; i++) {
      const e = want[i], a = got[i];
      const diff = Math.abs(a - e);
      if (Math.abs(e) > maxRef) maxRef = Math.abs(e);
      if (!(diff <= tol.atol + tol.rtol * Math.abs(e))) {
        bad++;
        firstBad ??= `${name}[${i}] = ${a}, expected ${e}`;
      }
      if (Number.isNaN(diff)) maxAbs = NaN;
      else if (diff > maxAbs) maxAbs = diff;
    }
  }

  let gpuUs: number | null = null;
  if (gpu.timestamps && reps > 0) {
    const timer = new PassTimer(gpu, reps + 1);
    const enc = device.createCommandEncoder();
    for (let r = 0; r <= reps; r++) {
      const p = enc.beginComputePass({ timestampWrites: timer.next("rep") });
      p.setPipeline(pipe.pipeline);
      p.setBindGroup(0, bindGroup);
      p.dispatchWorkgroups(...grid);
      p.end();
    }
    timer.resolve(enc);
    device.queue.submit([enc.finish()]);
    const spans = (await timer.read()).slice(1).map((s) => s.us).sort((a, b) => a - b);
    gpuUs = spans[Math.floor(spans.length / 2)];
    timer.destroy();
  }
  for (const b of created) b.destroy();
  const secs = gpuUs !== null && gpuUs > 0 ? gpuUs * 1e-6 : null;
  return {
    kernel: spec.name,
    case: kcase.label,
    variant: variant.name,
    maxAbs,
    maxRel: maxRef > 0 ? maxAbs / maxRef : maxAbs,
    atol: caseTol.atol,
    rtol: caseTol.rtol,
    pass: bad === 0,
    bad,
    firstBad,
    gpuUs,
    gbps: secs ? kcase.bytes(variant) / secs / 1e9 : null,
    tflops: secs && kcase.flops ? kcase.flops / secs / 1e12 : null,
    bytes: kcase.bytes(variant),
    flops: kcase.flops,
  };
}
