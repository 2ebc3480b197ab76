/**
 * The measurement protocol on real WGSL (the software Vulkan driver in CI): the tiny
 * fixture tiny-qwen3-moe, a three-point manifest. Decode rows are the steady step, a
 * giant point keeps three raw samples and their upper median, the fake prefix is hit
 * exactly, ids run 1..N, the pool balances, GPU times sit beside host walls, and the
 * soft timeout ends a run partial.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Engine } from "../../src/engine/engine.ts";
import { GpuModel } from "../../src/model/gpu_model.ts";
import type { BenchArtifact, EngineInfo } from "../../src/bench/artifact.ts";
import { checkArtifact } from "../../src/bench/artifact_check.ts";
import { FULL_GRID } from "../../src/bench/grid.ts";
import { checkManifest } from "../../src/bench/manifest.ts";
import { type BenchOptions, BenchRun } from "../../src/bench/run_bench.ts";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { sharedGpu } from "../shared_gpu.ts";

const gpu = await sharedGpu();
const model = await GpuModel.load(gpu, ensureFixture("tiny-qwen3-moe").dir, {
  numBlocks: 256,
  maxNumTokens: 64,
  maxNumSeqs: 4,
  maxModelLen: 256,
});
const engine = new Engine(model, {
  asyncScheduling: true,
  maxNumBatchedTokens: model.maxNumTokens,
  maxNumSeqs: model.maxNumSeqs,
});
const info: EngineInfo = {
  model: "tiny-qwen3-moe",
  architecture: model.config.architecture,
  moe: true,
  num_layers: model.config.numLayers,
  hidden_size: model.config.hiddenSize,
  num_experts: model.config.numExperts,
  experts_per_token: model.config.numExpertsPerTok,
  vocab_size: model.vocabSize,
  dtype: model.weights.dtype,
  num_blocks: model.numBlocks,
  async_scheduling: true,
  adapter: {
    description: gpu.adapter.description,
    vendor: gpu.adapter.vendor,
    architecture: gpu.adapter.architecture,
    type: gpu.adapter.type,
    backend: gpu.adapter.backend,
    driver: gpu.adapter.driver,
    timestamps: gpu.timestamps,
    f16: gpu.f16,
  },
  runtime: "test",
  webfpm_version: "test",
};

async function bench(manifest: unknown, options: Partial<BenchOptions>): Promise<BenchArtifact> {
  const out = join(mkdtempSync(join(tmpdir(), "webfpm-bench-gpu-")), "artifact.json");
  const run = new BenchRun({
    runId: "gpu-test",
    out,
    mode: "agg",
    manifest: { manifest: checkManifest(manifest), path: "m.json", sha256: "0".repeat(64) },
    grid: { preset: "full", limits: FULL_GRID },
    policy: { repeats: 3, giantKvThreshold: 64 },
    softTimeoutSeconds: null,
    content: "random",
    contentSeed: "0",
    kvwarm: "off",
    checkpointEvery: 0,
    rank: 0,
    dpSize: 1,
    warmup: { promptTokens: 16, steps: 2 },
    log: () => {},
    ...options,
  });
  const artifact = await run.run({ engine, engineInfo: info });
  assert.equal(JSON.parse(readFileSync(out, "utf8")), artifact, "the file holds the artifact");
  assert.equal(checkArtifact(artifact), [], "the artifact checks against its types");
  return artifact;
}

test("a three-point manifest on the GPU: steady decode rows, median-of-3, exact fake prefix, ids 1..N, balanced pool", async () => {
  const a = await bench({
    schema_version: 1,
    decode: [{ batch_size: 1, total_kv_read_tokens: 40 }, {
      batch_size: 2,
      total_kv_read_tokens: 64,
    }],
    prefill: [{ batch_size: 2, total_prefill_tokens: 32, total_kv_read_tokens: 32 }],
  }, {});
  assert.equal([a.status, a.valid, a.usable], ["complete", true, true]);
  assert.equal(a.results.map((r) => [r.benchmark_id, r.point_key, r.kv_seed_regime, r.repeats]), [
    [1, "decode:B2:K64", "legacy", 3],
    [2, "decode:B1:K40", "legacy", 1],
    [3, "prefill:B2:T32:K32", "fake_prefix", 1],
  ]);
  for (const r of a.results) {
    assert.is(r.kv_pool.blocks_free_after, r.kv_pool.blocks_free_before, r.point_key);
    assert.is(r.kv_pool.blocks_total, 255);
  }
  const giant = a.results[0].fpms[0];
  const g = giant.benchmark_measurement;
  assert.equal(
    [
      g.admission!.num_prefill_requests,
      g.admission!.sum_prefill_tokens,
      g.admission!.sum_prefill_kv_tokens,
    ],
    [2, 2, 62],
    "the admission step computes the last prompt token of each request",
  );
  assert.equal(g.samples.map((s) => [s.num_decode_requests, s.sum_decode_kv_tokens]), [
    [2, 64],
    [2, 66],
    [2, 68],
  ]);
  const walls = g.samples.map((s) => s.wall_time);
  assert.is(giant.wall_time, [...walls].sort((x, y) => x - y)[1]);
  assert.equal([g.estimate.method, g.estimate.median_of], ["upper_median", 3]);
  assert.is(
    giant.sum_decode_kv_tokens,
    g.samples[g.estimate.sample_indices[0]].sum_decode_kv_tokens,
  );
  const d1 = a.results[1].fpms[0];
  assert.equal([d1.num_decode_requests, d1.sum_decode_kv_tokens, d1.num_prefill_requests], [
    1,
    40,
    0,
  ]);
  const p = a.results[2].fpms[0];
  assert.equal([p.num_prefill_requests, p.sum_prefill_tokens, p.sum_prefill_kv_tokens], [
    2,
    32,
    32,
  ]);
  assert.is(p.benchmark_measurement.preparation.prefix_hit_tokens, 32);
  if (gpu.timestamps) {
    for (const r of a.results) {
      for (const s of r.fpms[0].benchmark_measurement.samples) {
        assert.ok(s.gpu_time !== null && s.gpu_time > 0, "GPU time beside the host wall");
      }
    }
  }
  assert.ok(a.measurement_protocol.gc.exposed, "the test task runs with the GC exposed");
  assert.ok(a.measurement_protocol.gc.collections >= 3, "one collection per point boundary");
  assert.is(engine.kvUsage().inUse, 0);
});

test("on the GPU the soft timeout ends the run partial after the point in progress", async () => {
  const a = await bench({
    schema_version: 1,
    decode: [{ batch_size: 1, total_kv_read_tokens: 20 }, {
      batch_size: 1,
      total_kv_read_tokens: 10,
    }],
  }, { softTimeoutSeconds: 1e-6 });
  assert.equal([a.status, a.stop_reason, a.valid, a.usable], [
    "partial",
    "soft_timeout",
    true,
    false,
  ]);
  assert.equal(a.results.map((r) => r.point_key), ["decode:B1:K20"]);
  assert.is(a.coverage.points_not_run, 1);
});

test.after(() => model.destroy());

test.run();
