/**
 * A benchmark sweep on two ranks in one process (CPU test doubles, real ZeroMQ sockets):
 * the capacity agreed before the grid, every point agreed and its group wall the max over
 * ranks, kvwarm eligibility only when every rank is eligible, skipped points agreed, a
 * failing rank failing the group with its error, and kvwarm's stage round over the group.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BenchArtifact, KvwarmSection } from "../../../src/bench/artifact.ts";
import { checkArtifact } from "../../../src/bench/artifact_check.ts";
import {
  type DecodeSeedOutcome,
  type DecodeSeedRequest,
  FakeKvSeeder,
} from "../../../src/bench/decode_seeder.ts";
import type { Engine } from "../../../src/engine/engine.ts";
import {
  FakePrefixSeeder,
  type PrefixSeedOutcome,
  type PrefixSeedRequest,
} from "../../../src/bench/prefix_seeder.ts";
import type { StepDriver } from "../../../src/bench/step_driver.ts";
import type { StepBatch, StepOutput } from "../../../src/model/step_batch.ts";
import { mergeRankFiles } from "../../../src/bench/dp/artifact_merge.ts";
import { DpError, type StagePhase } from "../../../src/dp/mod.ts";
import { CpuTestModel } from "../../engine/cpu_test_model.ts";
import { cpuModel, createRanks, runGroup } from "./group_harness.ts";
import { MOE_ENGINE_INFO, qwen3Tokenizer, VOCAB } from "../kvwarm/kvwarm_harness.ts";

const DECODE = {
  schema_version: 1,
  decode: [
    { batch_size: 2, total_kv_read_tokens: 20 },
    { batch_size: 1, total_kv_read_tokens: 12 },
    { batch_size: 1, total_kv_read_tokens: 30 },
  ],
  prefill: [{ batch_size: 2, total_prefill_tokens: 16, total_kv_read_tokens: 0 }],
};

// decode points for kvwarm on the CPU double: rungs B4 (depth 53) and B2
const KVWARM_DECODE = {
  schema_version: 1,
  decode: [
    { batch_size: 4, total_kv_read_tokens: 200 },
    { batch_size: 4, total_kv_read_tokens: 40 },
    { batch_size: 2, total_kv_read_tokens: 120 },
  ],
};

function valid(a: BenchArtifact): void {
  assert.equal(checkArtifact(a), [], "the artifact checks against its types");
}

function fulfilled(o: PromiseSettledResult<BenchArtifact>): BenchArtifact {
  if (o.status === "rejected") throw o.reason;
  return o.value;
}

test("two ranks with different pools plan one grid against the smaller, agree on every point, and the group wall is the max over ranks", async () => {
  const g = await runGroup(2, null, (rank) => ({ model: cpuModel(rank === 0 ? 256 : 160) }));
  const [a0, a1] = g.outcomes.map(fulfilled);
  for (const a of [a0, a1]) valid(a);
  assert.equal([a0.status, a1.status], ["complete", "complete"]);
  assert.is(a0.capacity!.usable_blocks, 159, "planned against the smaller pool (160 - null block)");
  assert.is(a1.capacity!.usable_blocks, 159);
  assert.is(a0.attention_dp!.envelope!.usable_blocks, 255, "rank 0 offered its own");
  assert.is(a0.grid_digest, a1.grid_digest);
  const keys = a0.results.map((r) => r.point_key);
  assert.ok(keys.length >= 4, `the smoke grid has points: ${keys}`);
  assert.equal(a1.results.map((r) => r.point_key), keys);
  assert.equal(a0.iteration_groups, a1.iteration_groups, "both ranks hold the group walls");
  for (const [i, group] of a0.iteration_groups.entries()) {
    const walls = [a0, a1].map((a) =>
      a.results[i].fpms[0].benchmark_measurement.samples.map((s) => s.wall_time)
    );
    assert.equal(group.iteration_walls, walls[0].map((w, k) => Math.max(w, walls[1][k])));
    assert.is(group.ranks, 2);
  }
  for (const [rank, a] of [a0, a1].entries()) {
    const dp = a.attention_dp!;
    assert.equal([dp.rank, dp.size, dp.source, dp.gpu_select], [rank, 2, "flags", null]);
    assert.ok(dp.step_round.rounds > 10, "a barrier after every step");
    assert.is(dp.idle_barrier!.rounds, 200);
    assert.is(dp.rounds.barrier.rounds, dp.step_round.rounds + 200);
    assert.is(dp.rounds.ready.rounds, keys.length);
    assert.is(a.results[0].fpms[0].rank, rank);
  }
  assert.is(
    a0.attention_dp!.step_round.rounds,
    a1.attention_dp!.step_round.rounds,
    "both ranks took the same steps",
  );
  const merged = mergeRankFiles(g.out, 2);
  valid(merged);
  assert.equal([merged.status, merged.results.length], ["complete", keys.length]);
  assert.equal(merged.results[0].fpms.map((f) => f.rank), [0, 1]);
  assert.equal(merged.iteration_groups, a0.iteration_groups);
  assert.equal(merged.attention_dp!.merged_ranks!.map((s) => [s.rank, s.status]), [
    [0, "complete"],
    [1, "complete"],
  ]);
});

test("the soft timeout is an OR over ranks: one rank's deadline stops every rank at the same boundary", async () => {
  const g = await runGroup(
    2,
    DECODE,
    (rank) => (rank === 1 ? { options: { softTimeoutSeconds: 1e-6 } } : {}),
  );
  const [a0, a1] = g.outcomes.map(fulfilled);
  for (const a of [a0, a1]) {
    valid(a);
    assert.equal([a.status, a.stop_reason, a.results.length], ["partial", "soft_timeout", 1]);
  }
  assert.is(a0.limits.soft_timeout_seconds, null, "rank 0 had no deadline of its own");
});

test("the clock warm-up ends on every rank at once: the rank whose time is up first decides", async () => {
  // rank 0 would warm up for 0.2 s, rank 1 for an hour: the group's vote ends both after rank
  // 0's time, with the same requests (their steps meet at the per-step barrier)
  const g = await runGroup(
    2,
    DECODE,
    (rank) => ({ options: { warmupSeconds: rank === 0 ? 0.2 : 3600 } }),
    30,
  );
  const [a0, a1] = g.outcomes.map(fulfilled);
  valid(a0);
  valid(a1);
  const c0 = a0.measurement_protocol.preparation.warmup!.clock!;
  const c1 = a1.measurement_protocol.preparation.warmup!.clock!;
  assert.ok(c0.requests >= 1);
  assert.equal([c1.requests, c1.steps], [c0.requests, c0.steps], "the same clock requests");
  assert.is(c1.min_seconds, 3600);
  assert.ok(c1.seconds < 60, `rank 1 stopped with rank 0 (${c1.seconds} s)`);
  assert.equal(a0.results.length, a1.results.length);
});

/** A decode seeder that says it could seed real KV, until the group says otherwise. */
class EligibleSeeder extends FakeKvSeeder {
  reason: string | null = null;
  constructor() {
    super({ requested: "on", skipReason: "unused" });
  }
  groupIneligible(reason: string): void {
    this.reason = reason;
  }
  override section(): KvwarmSection {
    return { ...super.section(), warm_eligible: this.reason === null, skip_reason: this.reason };
  }
}

test("kvwarm eligibility is every rank's: an eligible rank whose peer is not records peer_ineligible", async () => {
  const eligible = new EligibleSeeder();
  const g = await runGroup(
    2,
    DECODE,
    (rank) => (rank === 0 ? { plugins: { decodeSeeder: eligible } } : {}),
  );
  const [a0, a1] = g.outcomes.map(fulfilled);
  assert.is(eligible.reason, "peer_ineligible");
  assert.equal(
    [a0.attention_dp!.envelope!.kvwarm_eligible, a0.attention_dp!.negotiated!.kvwarm_skip_reason],
    [true, "peer_ineligible"],
  );
  assert.equal(
    [
      a1.attention_dp!.envelope!.kvwarm_skip_reason,
      a1.attention_dp!.negotiated!.kvwarm_skip_reason,
    ],
    ["flag_off", "flag_off"],
  );
  assert.equal([a0.kvwarm.warm_eligible, a0.kvwarm.skip_reason], [false, "peer_ineligible"]);
  assert.ok(
    g.logs[0].some((l) => /kvwarm off \(peer_ineligible; first: rank 1 flag_off\)/.test(l)),
  );
});

/** Fake KV, except that the points named in `refuse` cannot be seeded. */
class RefusingSeeder extends FakeKvSeeder {
  constructor(private readonly refuse: (requests: readonly DecodeSeedRequest[]) => boolean) {
    super({ requested: "off", skipReason: "flag_off" });
  }
  override seed(engine: Engine, requests: readonly DecodeSeedRequest[]): DecodeSeedOutcome {
    if (this.refuse(requests)) return { ok: false, reason: "test_refusal: no KV for this point" };
    return super.seed(engine, requests);
  }
}

const isB1K30 = (requests: readonly DecodeSeedRequest[]) =>
  requests.length === 1 && requests[0].computed + 1 === 30;

test("a point every rank skips is skipped on every rank, the others measured", async () => {
  const g = await runGroup(2, DECODE, () => ({
    plugins: { decodeSeeder: new RefusingSeeder(isB1K30) },
  }));
  const [a0, a1] = g.outcomes.map(fulfilled);
  for (const a of [a0, a1]) {
    valid(a);
    assert.equal(a.skipped_points.map((s) => [s.point_key, s.reason]), [
      ["decode:B1:K30", "replica: test_refusal: no KV for this point"],
    ]);
    assert.is(a.results.length, 3);
  }
  const merged = mergeRankFiles(g.out, 2);
  valid(merged);
  assert.equal([merged.results.length, merged.skipped_points.length], [3, 1]);
});

test("a point one rank skips before stepping (its replica) fails the group as out of lockstep, naming the rank", async () => {
  const g = await runGroup(2, DECODE, (rank) => ({
    plugins: { decodeSeeder: new RefusingSeeder((r) => rank === 1 && isB1K30(r)) },
  }));
  const [o0, o1] = g.outcomes;
  assert.is(o0.status, "rejected");
  assert.is(o1.status, "rejected");
  const e0 = (o0 as PromiseRejectedResult).reason as DpError;
  assert.instance(e0, DpError);
  assert.is(e0.code, "lockstep");
  assert.match(
    e0.message,
    /ranks are not in lockstep: rank 1 sent arm benchmark_id=\d+ .* while rank 0 waits for barrier/,
  );
  assert.match(
    String((o1 as PromiseRejectedResult).reason.message),
    /^rank 0 stopped the group: ranks are not in lockstep/,
  );
  for (const f of g.files) {
    valid(f);
    assert.is(f.status, "failed");
    assert.ok(f.results.length >= 1, "the points measured before stay in the artifact");
  }
  assert.equal(
    g.files[0].results.map((r) => r.point_key),
    g.files[1].results.map((r) => r.point_key),
  );
});

/** Fake prefixes, except that the measured shots' prefixes are never seeded (a miss). */
class ForgetfulPrefixSeeder extends FakePrefixSeeder {
  override seed(
    driver: StepDriver,
    requests: readonly PrefixSeedRequest[],
  ): Promise<PrefixSeedOutcome> {
    if (requests[0].cacheSalt.includes(":measure")) {
      return Promise.resolve({ ok: true, method: "forgot", blocks: 0 });
    }
    return super.seed(driver, requests);
  }
}

test("a point one rank measured while another skipped it in the same steps fails the group, naming the rank and its reason", async () => {
  const manifest = {
    schema_version: 1,
    decode: [{ batch_size: 1, total_kv_read_tokens: 12 }],
    prefill: [{ batch_size: 1, total_prefill_tokens: 8, total_kv_read_tokens: 8 }],
  };
  const g = await runGroup(2, manifest, (rank) => ({
    plugins: rank === 1 ? { prefixSeeder: new ForgetfulPrefixSeeder() } : {},
  }));
  const [o0, o1] = g.outcomes;
  const e0 = (o0 as PromiseRejectedResult).reason as DpError;
  assert.instance(e0, DpError);
  assert.is(
    e0.message,
    "ranks are not in lockstep: rank 0 measured benchmark_id=2 but rank 1 " +
      "(fake_prefix_miss: slot 0 hit 0 of 8 prefix tokens) skipped it",
  );
  assert.equal(e0.ranks, [1]);
  assert.match(
    String((o1 as PromiseRejectedResult).reason.message),
    /rank 0 stopped the group: ranks are not in lockstep: rank 0 measured benchmark_id=2/,
  );
  for (const f of g.files) {
    valid(f);
    assert.equal([f.status, f.results.map((r) => r.point_key)], ["failed", ["decode:B1:K12"]]);
  }
});

/** A CPU double whose forward fails from its `failAt`-th call on. */
class FailingModel extends CpuTestModel {
  calls = 0;
  constructor(private readonly failAt: number) {
    super({ numBlocks: 256, blockSize: 4, maxModelLen: 128, strictKv: false });
  }
  override forward(batch: StepBatch): StepOutput {
    if (++this.calls >= this.failAt) throw new Error("injected device loss");
    return super.forward(batch);
  }
}

test("a rank that fails mid-sweep fails the group at once with its error; both artifacts keep their points", async () => {
  const failing = new FailingModel(12);
  const g = await runGroup(2, DECODE, (rank) => (rank === 1 ? { model: failing } : {}));
  assert.is(failing.calls, 12, "rank 1 failed during the sweep, at its 12th forward");
  const [o0, o1] = g.outcomes;
  assert.is(o1.status, "rejected");
  assert.match(String((o1 as PromiseRejectedResult).reason.message), /injected device loss/);
  assert.is(o0.status, "rejected");
  const e0 = (o0 as PromiseRejectedResult).reason as DpError;
  assert.instance(e0, DpError);
  assert.is(e0.code, "peer_failure");
  assert.match(e0.message, /rank 1 failed: injected device loss/);
  assert.equal(e0.ranks, [1]);
  const [f0, f1] = g.files;
  for (const f of [f0, f1]) {
    valid(f);
    assert.equal([f.status, f.error!.kind], ["failed", "runtime"]);
    assert.ok(f.results.length >= 1 && f.results.length < 4, `${f.results.length} points kept`);
  }
  assert.match(f0.error!.message, /rank 1 failed: injected device loss/);
  const merged = mergeRankFiles(g.out, 2);
  valid(merged);
  assert.is(merged.status, "failed");
  assert.match(merged.error!.message, /^rank 1: injected device loss/);
  assert.ok(merged.results.length >= 1);
  assert.ok(merged.results.every((r) => r.fpms.length === 2));
});

test("kvwarm's first stage inside the clock warm-up keeps two ranks of unequal pools in lockstep", async () => {
  // both ranks build the B4 stage (4 chains of 53 tokens, 56 blocks of 4) inside the warm-up;
  // beside them rank 1's pool (70 blocks) holds clock requests of 51 tokens, rank 0's of 64:
  // different requests, the same steps and the same number of them
  const models: CpuTestModel[] = [];
  const g = await runGroup(2, KVWARM_DECODE, (rank) => ({
    model: models[rank] = cpuModel(rank === 0 ? 256 : 70, VOCAB),
    options: { kvwarm: "auto", warmupSeconds: 0.3 },
    inputs: { engineInfo: MOE_ENGINE_INFO, tokenizer: qwen3Tokenizer },
  }), 30);
  const [a0, a1] = g.outcomes.map(fulfilled);
  valid(a0);
  valid(a1);
  assert.equal([a0.status, a1.status], ["complete", "complete"]);
  const c0 = a0.measurement_protocol.preparation.warmup!.clock!;
  const c1 = a1.measurement_protocol.preparation.warmup!.clock!;
  assert.equal([c0.requests, c0.steps], [c1.requests, c1.steps], "the same clock requests");
  assert.ok(c0.requests >= 1 && c0.steps === 2 * c0.requests);
  assert.ok([c0.ended, c1.ended].every((e) => e === "time" || e === "stop"));
  const prefills = (m: CpuTestModel, n: number) =>
    m.batches.filter((x) => x.tokenIds.length === n).length;
  assert.is(prefills(models[0], 64), c0.requests, "rank 0's clock requests: 64 tokens");
  assert.is(prefills(models[1], 51), c1.requests, "rank 1's: 51, what its pool holds");
  assert.ok(c0.counted_seconds! > 0 && c1.counted_seconds! > 0, "each rank's stage counted");
  for (const a of [a0, a1]) {
    assert.equal(a.kvwarm.stages.map((s) => [s.batch, s.ok]), [[4, true], [2, true]]);
    assert.equal(a.results.map((r) => r.kv_seed_regime), ["real_kv", "real_kv", "real_kv"]);
  }
  assert.equal(a0.iteration_groups, a1.iteration_groups);
});

test("a kvwarm stage that fails mid-build on one rank only: both ranks leave it in lockstep, its points on fake KV", async () => {
  // rank 1's build rounds wait 300 ms each and its soft timeout (0.5 s from the sweep's start)
  // passes while its chains are still prefilling in 64-token steps: its stage fails with a step
  // in flight, rank 0's parks; both must take the same steps after the group's verdict
  const g = await runGroup(2, KVWARM_DECODE, (rank) => ({
    model: cpuModel(256, VOCAB),
    options: {
      kvwarm: "auto",
      kvwarmStepTokens: 64,
      softTimeoutSeconds: rank === 1 ? 0.5 : null,
    },
    inputs: { engineInfo: MOE_ENGINE_INFO, tokenizer: qwen3Tokenizer },
    wrap: (own) => ({
      stageSettlement: {
        async round(seq, batch, phase, ok) {
          if (rank === 1 && batch !== null) await new Promise((r) => setTimeout(r, 300));
          return await own.stageSettlement.round(seq, batch, phase, ok);
        },
      },
    }),
  }), 30);
  const [a0, a1] = g.outcomes.map(fulfilled);
  valid(a0);
  valid(a1);
  for (const a of [a0, a1]) {
    assert.equal([a.status, a.stop_reason], ["partial", "soft_timeout"]);
    assert.equal(a.kvwarm.stages[0].batch, 4);
    assert.is(a.kvwarm.stages[0].ok, false);
    assert.is(a.results[0].kv_seed_regime, "fake_fallback");
  }
  assert.match(a1.kvwarm.stages[0].reason!, /^soft_timeout: the soft timeout passed mid-build/);
  assert.match(a0.kvwarm.stages[0].reason!, /^peer_stage_failed/);
});

test("kvwarm's stage round over the group: a rank still building holds every rank; the stage settles on all in one round, logged once each", async () => {
  const { ranks, logs } = await createRanks(2);
  await Promise.all(ranks.map((r) => r.connect()));
  const round = (seq: number, status: [StagePhase, boolean | null][]) =>
    Promise.all(
      ranks.map((r, rank) =>
        r.stages.round(seq, status[rank][0] === "none" ? null : 4, ...status[rank])
      ),
    );
  const idle = await round(1, [["none", null], ["none", null]]);
  assert.equal(idle.map((v) => v.allDone), [false, false]);
  const early = await round(2, [["done", true], ["building", null]]);
  assert.equal(early.map((v) => [v.allDone, v.ok]), [[false, null], [false, null]]);
  const settled = await round(3, [["done", true], ["done", true]]);
  assert.equal(settled.map((v) => [v.allDone, v.ok]), [[true, true], [true, true]]);
  const failed = await round(4, [["done", true], ["done", false]]);
  assert.equal(failed.map((v) => [v.allDone, v.ok]), [[true, false], [true, false]]);
  for (const [rank, r] of ranks.entries()) {
    assert.equal(r.stages.settled(), [
      { batch: 4, ok: true, round: 3 },
      { batch: 4, ok: false, round: 4 },
    ]);
    assert.equal(logs[rank].filter((l) => l.includes("settled")), [
      "kvwarm: stage batch=4 settled by the group (ok=true) at round 3",
      "kvwarm: stage batch=4 settled by the group (ok=false) at round 4",
    ]);
    assert.equal(r.section().stages_settled, r.stages.settled());
    assert.is(r.section().rounds.stage.rounds, 4);
  }
  const skew = await Promise.allSettled(
    ranks.map((r, rank) => r.stages.round(5 + rank, 4, "building", null)),
  );
  for (const o of skew) {
    assert.is(o.status, "rejected");
    assert.match(String((o as PromiseRejectedResult).reason.message), /ranks are not in lockstep/);
  }
  for (const r of ranks) r.close();
});

test.run();
