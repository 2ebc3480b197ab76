/**
 * Real prefix seeding of prefill KV-read points (`--prefill-real-seed`): each shot's
 * prefixes are staged by a real prefill, an untimed warm shot runs the point's exact step
 * shape right before the measured one, the measured requests hit exactly their prefix,
 * and a miss gets one re-stage, then the point is skipped with the reason.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { checkArtifact } from "../../../src/bench/artifact_check.ts";
import type { StepObservation } from "../../../src/engine/step_observation.ts";
import { cpuBench, runCpuBench } from "../bench_harness.ts";

const POINT = {
  schema_version: 1,
  prefill: [
    { batch_size: 2, total_prefill_tokens: 8, total_kv_read_tokens: 16 },
    { batch_size: 2, total_prefill_tokens: 8, total_kv_read_tokens: 0 },
  ],
};

test("staged prefix, a same-shape warm shot right before the measured step, exact hits, median-of-3", async () => {
  const b = cpuBench(POINT, { prefillRealSeed: true }, { strictKv: true });
  const obs: StepObservation[] = [];
  b.engine.onStep((o) => obs.push(o));
  const { artifact: a } = await runCpuBench(b);
  assert.equal(checkArtifact(a), []);
  assert.equal(a.results.map((r) => [r.point_key, r.kv_seed_regime, r.repeats]), [
    ["prefill:B2:T8:K16", "real_prefix", 3],
    ["prefill:B2:T8:K0", "not_applicable", 1],
  ]);
  const m = a.results[0].fpms[0].benchmark_measurement;
  assert.equal([m.preparation.method, m.preparation.prefix_hit_tokens], ["real_prefix_staged", 16]);
  assert.equal(m.prompts.map((p) => p.computed_tokens), [8, 8, 8, 8, 8, 8], "each hit its prefix");
  for (const s of m.samples) {
    const at = obs.findIndex((o) => o.stepId === s.step_id);
    const warm = obs[at - 1];
    assert.equal(
      [warm.numPrefillRequests, warm.sumPrefillTokens, warm.sumPrefillKvTokens],
      [2, 8, 16],
      "the step before each measured one is its untimed warm shot",
    );
  }
  assert.equal(a.kvwarm.prefill_real_seed, {
    enabled: true,
    shots_staged: 4, // the replica and three measured shots
    warm_shots: 4,
    restages: 0,
    misses: 0,
  });
  assert.is(
    a.measurement_protocol.preparation.prefill_kv_read,
    "real_prefix_staged_warm_shot_exact_hit",
  );
});

test("a prefix the warm shot evicts gets one re-stage, then the point is skipped with the reason", async () => {
  // 9 usable blocks: the warm shot's new blocks evict the measured prefix every time
  const b = cpuBench(POINT, { prefillRealSeed: true }, { numBlocks: 10, maxModelLen: 32 });
  const { artifact: a } = await runCpuBench(b);
  assert.equal(checkArtifact(a), []);
  assert.equal(a.skipped_points.map((s) => [s.point_key, s.kv_seed_regime]), [
    ["prefill:B2:T8:K16", "real_prefix"],
  ]);
  assert.match(
    a.skipped_points[0].reason,
    /^replica: real_prefix_miss: slot \d finds \d+ of 8.* \(after one re-stage\)$/,
  );
  assert.equal(a.kvwarm.prefill_real_seed, {
    enabled: true,
    shots_staged: 1,
    warm_shots: 2,
    restages: 1,
    misses: 1,
  });
  assert.ok(b.logs.some((l) => l.startsWith("real prefix: re-staging (")));
  assert.equal(a.results.map((r) => r.point_key), ["prefill:B2:T8:K0"]);
  assert.is(b.engine.kvUsage().inUse, 0);
});

test("without the flag, KV-read points use the fake prefix", async () => {
  const { artifact: a } = await runCpuBench(cpuBench(POINT));
  assert.equal(a.results.map((r) => r.kv_seed_regime), ["fake_prefix", "not_applicable"]);
  assert.is(a.kvwarm.prefill_real_seed.enabled, false);
});

test.run();
