/**
 * What a GpuModel takes it gives back, and a step it refuses leaves no trace: a load that fails
 * after the KV cache frees every buffer, destroy() frees every buffer the model made (kernel
 * params, sample staging), a failed synthetic draw frees its kernel, a refused step does not
 * shift the next step's sampled-id buffer, and a routing capture outlives its observer's removal.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { openGpu } from "../../src/gpu/device.ts";
import { GpuModel } from "../../src/model/gpu_model.ts";
import { GpuWeights } from "../../src/model/gpu_weights.ts";
import { syntheticConfig } from "../../src/model/config.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { buildBatch, maxAbsDiff } from "./gpu_model_step.ts";

const MODEL_OPTIONS = {
  dtype: "f32",
  blockSize: 4,
  numBlocks: 16,
  maxNumTokens: 32,
  maxNumSeqs: 4,
  maxModelLen: 64,
} as const;
const moeDir = ensureFixture("tiny-qwen3-moe").dir;
const prompt = [9707, 11, 1879, 0, 358, 1079, 264, 1273];

/** Buffers `device` creates from now on and has not destroyed (labels), until `stop`. */
function trackBuffers(device: GPUDevice) {
  const live = new Map<GPUBuffer, string>();
  const create = device.createBuffer;
  (device as { createBuffer: GPUDevice["createBuffer"] }).createBuffer = function (desc) {
    const b = create.call(device, desc);
    live.set(b, desc.label ?? "");
    const destroy = b.destroy;
    (b as { destroy: () => void }).destroy = function () {
      live.delete(b);
      return destroy.call(b);
    };
    return b;
  };
  return {
    labels: () => [...live.values()].sort(),
    stop: () => {
      delete (device as { createBuffer?: unknown }).createBuffer;
      if (device.createBuffer !== create) {
        (device as { createBuffer: GPUDevice["createBuffer"] }).createBuffer = create;
      }
    },
  };
}

test("a GpuModel.load that fails after the KV cache is allocated frees every buffer it took", async () => {
  const gpu = await openGpu();
  const tracked = trackBuffers(gpu.device);
  try {
    // submitLayers is checked after KvBuffers.allocate (in create's opts)
    const err = await GpuModel.load(gpu, moeDir, { ...MODEL_OPTIONS, submitLayers: -1 })
      .then(() => null, (e) => e as Error);
    assert.ok(err && /submitLayers/.test(err.message), String(err));
    const left = tracked.labels();
    assert.equal(left, [], `left allocated: ${left.join(", ")}`);
  } finally {
    tracked.stop();
    gpu.destroy();
  }
});

test("GpuModel.destroy frees every buffer the model created (params, sample staging)", async () => {
  const gpu = await openGpu();
  const tracked = trackBuffers(gpu.device);
  try {
    const model = await GpuModel.load(gpu, moeDir, MODEL_OPTIONS);
    const out = model.forward(
      buildBatch(4, [{ tokens: prompt, start: 0, table: [1, 2, 3], rows: "last" }]).batch,
    );
    await Promise.all([out.sampled, out.logits!, out.gpuMs]);
    model.destroy();
    const left = tracked.labels();
    assert.equal(left, [], `left allocated after destroy: ${left.join(", ")}`);
  } finally {
    tracked.stop();
    gpu.destroy();
  }
});

test("a step forward() refuses does not shift the next step's sampled-id buffer", async () => {
  const gpu = await sharedGpu();
  const model = await GpuModel.load(gpu, moeDir, MODEL_OPTIONS);
  try {
    const prefill = (table: number[]) =>
      buildBatch(4, [{ tokens: prompt, start: 0, table, rows: "all" }]).batch;
    const decode = (table: number[]) =>
      buildBatch(4, [{ tokens: [{ ref: 7 }], start: 8, table, rows: "last" }]).batch;
    await model.forward(prefill([1, 2, 3])).sampled;
    const want = model.forward(decode([1, 2, 3]));
    const [wantIds, wantLogits] = await Promise.all([want.sampled, want.logits!]);

    await model.forward(prefill([5, 6, 7])).sampled;
    // a step refused in encode (a block to zero outside the cache): nothing of it runs
    const bad = { ...decode([5, 6, 7]), blockZeros: [999] };
    assert.throws(() => model.forward(bad), /zero-fill is outside/);
    const got = model.forward(decode([5, 6, 7]));
    const [ids, logits] = await Promise.all([got.sampled, got.logits!]);
    assert.equal(ids, wantIds, "the decode step read the prefill's sampled row 7");
    assert.is(maxAbsDiff(logits, wantLogits), 0);
  } finally {
    model.destroy();
  }
});

test("GpuWeights.synthetic that fails frees its fill kernel's params buffer", async () => {
  const gpu = await openGpu();
  const tracked = trackBuffers(gpu.device);
  try {
    // expert tiles need f16: build() refuses before any weight is allocated
    const err = await GpuWeights.synthetic(
      gpu,
      syntheticConfig("synthetic:qwen3-30b-a3b"),
      "f32",
      { expertTiles: true },
    ).then(() => null, (e) => e as Error);
    assert.ok(err && /tiles need f16/.test(err.message), String(err));
    const left = tracked.labels();
    assert.equal(left, [], `left allocated: ${left.join(", ")}`);
  } finally {
    tracked.stop();
    gpu.destroy();
  }
});

test("a routing observer removed while a prepared step waits still gets that step, with no unhandled rejection", async () => {
  const gpu = await sharedGpu();
  const model = await GpuModel.load(gpu, moeDir, MODEL_OPTIONS);
  const unhandled: unknown[] = [];
  const onUnhandled = (e: PromiseRejectionEvent) => {
    e.preventDefault();
    unhandled.push(e.reason);
  };
  globalThis.addEventListener("unhandledrejection", onUnhandled);
  try {
    const captures: unknown[] = [];
    model.routingObserver = (c) => captures.push(c);
    const step = model.prepare(
      buildBatch(4, [{ tokens: prompt, start: 0, table: [1, 2, 3], rows: "last" }]).batch,
    );
    model.routingObserver = null; // e.g. a debug session ends
    const out = step.launch();
    await out.sampled;
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(unhandled.map(String), [], "no unhandled rejection");
    assert.is(
      captures.length,
      1,
      "the step's routing reached the observer set when it was encoded",
    );
  } finally {
    globalThis.removeEventListener("unhandledrejection", onUnhandled);
    model.destroy();
  }
});

test.run();
