/**
 * kvwarm in the sweep (CPU double, every number exact): real-KV points first, rung by
 * rung, median-of-3, measured on shadows of chains that extend each other; fake ones
 * last with their reasons; a stage the group fails falls back to fake KV for its rung;
 * a peer still building keeps this rank stepping until the round where it is done; the
 * soft timeout mid-build fails the stage, the rung's first point runs on fake KV and the
 * run ends partial.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { createHash } from "node:crypto";
import type { BenchArtifact, DecodePoint } from "../../../src/bench/artifact.ts";
import { checkArtifact } from "../../../src/bench/artifact_check.ts";
import { benchCapacity } from "../../../src/bench/capacity.ts";
import { KvwarmSeeder, type KvwarmSeederOptions } from "../../../src/bench/kvwarm/kvwarm_seeder.ts";
import {
  LocalStageSettlement,
  type StagePhase,
  type StageRoundVerdict,
  type StageSettlement,
} from "../../../src/bench/kvwarm/stage_settlement.ts";
import { decodePlan } from "../../../src/bench/partition.ts";
import { decodePoint, orderDecode } from "../../../src/bench/point.ts";
import { StepDriver } from "../../../src/bench/step_driver.ts";
import { settleStageRound, type StageStatus } from "../../../src/dp/stage_round.ts";
import {
  cpuEngine,
  eligibleGate,
  kvwarmBench,
  MOE_ENGINE_INFO,
  qwen3Tokenizer,
  runKvwarmBench,
} from "./kvwarm_harness.ts";

// ctx: B4K200 -> 50 (computed 49), B4K40 -> 10, B2K120 -> 60, B1K100 -> 100; B1K126 -> 126:
// 125 computed + 2 + 3 steady > max_model_len 128, so it cannot be a real-KV point
const MANIFEST = {
  schema_version: 1,
  decode: [
    { batch_size: 1, total_kv_read_tokens: 126 },
    { batch_size: 4, total_kv_read_tokens: 40 },
    { batch_size: 2, total_kv_read_tokens: 120 },
    { batch_size: 4, total_kv_read_tokens: 200 },
    { batch_size: 1, total_kv_read_tokens: 100 },
  ],
  prefill: [{ batch_size: 2, total_prefill_tokens: 8, total_kv_read_tokens: 16 }],
};

function rows(a: BenchArtifact) {
  return a.results.map((r) => [
    r.point_key,
    r.kv_seed_regime,
    r.repeats,
    r.fpms[0].benchmark_measurement.preparation.method,
  ]);
}

/** A group of this rank and a scripted peer, settled by the dp module's own rule. */
class PeerGroup implements StageSettlement {
  readonly verdicts: [seq: number, batch: number | null, allDone: boolean, ok: boolean | null][] =
    [];
  #rounds = new Map<number | null, number>();

  constructor(
    private readonly peer: (batch: number, roundOfStage: number) => StageStatus["phase"],
    private readonly peerOk: (batch: number) => boolean,
  ) {}

  round(
    seq: number,
    batch: number | null,
    phase: StagePhase,
    ok: boolean | null,
  ): Promise<StageRoundVerdict> {
    let peer: StageStatus = { seq, batch: null, phase: "none", ok: null };
    if (batch !== null) {
      const n = (this.#rounds.get(batch) ?? 0) + 1;
      this.#rounds.set(batch, n);
      const p = this.peer(batch, n);
      peer = { seq, batch, phase: p, ok: p === "done" ? this.peerOk(batch) : null };
    }
    const v = settleStageRound([{ seq, batch, phase, ok }, peer]);
    this.verdicts.push([seq, batch, v.allDone, v.ok]);
    return Promise.resolve(v);
  }
}

test("real-KV points run first, median-of-3, on shadows of chains that extend each other; fake ones last, with reasons", async () => {
  const b = kvwarmBench(MANIFEST, {}, { maxModelLen: 128 });
  const a = await runKvwarmBench(b);
  assert.equal(checkArtifact(a), []);
  assert.equal(rows(a), [
    ["decode:B4:K200", "real_kv", 3, "kvwarm_shadow"],
    ["decode:B4:K40", "real_kv", 3, "kvwarm_shadow"],
    ["decode:B2:K120", "real_kv", 3, "kvwarm_shadow"],
    ["decode:B1:K100", "real_kv", 3, "kvwarm_shadow"],
    ["decode:B1:K126", "fake_fallback", 1, "fake_kv_injection"],
    ["prefill:B2:T8:K16", "fake_prefix", 1, "fake_prefix"],
  ]);
  const k = a.kvwarm;
  assert.equal(
    k.stages.map((s) => [s.batch, s.depth, s.tokens_computed, s.tokens_reused, s.ok, s.points]),
    [
      [4, 53, 212, 0, true, 2], // depth 49 + 1 + 3
      [2, 63, 22, 104, true, 1], // chains 0, 1 reuse 52 cached tokens each
      [1, 103, 43, 60, true, 1],
    ],
  );
  assert.equal(
    [k.enabled, k.points_real_kv, k.points_fake_fallback, k.shadow_tail, k.settlement],
    [true, 4, 1, "cow", "local"],
  );
  assert.equal(k.point_fallbacks.map((f) => [f.point_key, f.reason.split(":")[0]]), [
    ["decode:B1:K126", "steady_span_exceeds_max_model_len"],
  ]);
  assert.equal(k.chains!.salt_rule, "__kvwarm_{rank}_{i}");
  assert.ok(k.dataset!.bodies_used > 0 && k.chains!.tokens_tokenized > 0);
  // a shadow's prompt is its chain's first computed + 1 tokens, under the slot's own salt
  const m = a.results[0].fpms[0].benchmark_measurement;
  const chain = eligibleGate(b.engine).content!.tokens(2, 50);
  const sha = createHash("sha256").update(new Uint8Array(Uint32Array.from(chain).buffer))
    .digest("hex");
  assert.equal([m.prompts[2].sha256, m.prompts[2].content_salt, m.prompts[2].prompt_tokens], [
    sha,
    null,
    50,
  ]);
  assert.match(m.prompts[2].cache_salt, /^bench:test-run:dp0:1:measure0:2$/);
  const steady = m.samples.map((s) => [s.num_decode_requests, s.sum_decode_kv_tokens]);
  assert.equal(steady, [[4, 200], [4, 204], [4, 208]]);
  assert.equal([m.estimate.method, m.estimate.median_of], ["upper_median", 3]);
  assert.equal(m.admission!.num_block_copies, 4, "each shadow's partial block, copied");
  assert.ok(a.measurement_protocol.unobserved.includes("kvwarm_stage"));
  assert.match(a.measurement_protocol.preparation.decode, /^kvwarm_shadow_untimed/);
  // the B4 stage's 212 tokens in one step of kvwarm's own budget (KVWARM_STAGE_TOKENS), not in
  // four of the engine's 64
  assert.ok(b.logs.includes("kvwarm: stage batch=4 settled locally (ok=true) at round 6"));
  assert.equal(k.stages.map((s) => s.step_tokens), [8192, 8192, 8192]);
  assert.ok(b.model.batches.some((x) => x.tokenIds.length === 212), "a stage step of 212 tokens");
  assert.is(b.engine.stepTokenBudget, 64, "the engine's budget again after the stages");
  for (const r of a.results) {
    for (const x of r.fpms[0].benchmark_measurement.samples) {
      assert.ok(x.num_scheduled_tokens <= 64, `${r.point_key}: a measured step within the budget`);
    }
  }
  assert.is(b.engine.kvUsage().inUse, 0, "every chain and shadow released");
  assert.not.ok(b.engine.hasUnfinishedRequests());
});

test("the first rung's stage builds inside the clock warm-up and counts toward it", async () => {
  // a build's rounds wait 250 ms each: the B4 stage (one step, one round) outlasts the 0.2 s
  // clock warm-up
  const local = new LocalStageSettlement(() => {});
  const slow: StageSettlement = {
    async round(seq, batch, phase, ok) {
      if (batch !== null) await new Promise((r) => setTimeout(r, 250));
      return local.round(seq, batch, phase, ok);
    },
  };
  const b = kvwarmBench(MANIFEST, { warmupSeconds: 0.2 }, { maxModelLen: 128 });
  const a = await b.run.run(
    { engine: b.engine, engineInfo: MOE_ENGINE_INFO, tokenizer: qwen3Tokenizer },
    { stageSettlement: slow },
  );
  assert.equal(checkArtifact(a), []);
  assert.equal(rows(a).slice(0, 4).map((r) => r[1]), ["real_kv", "real_kv", "real_kv", "real_kv"]);
  const k = a.kvwarm;
  assert.equal(k.stages.map((s) => s.batch), [4, 2, 1], "the B4 stage is not built again");
  const w = a.measurement_protocol.preparation.warmup!;
  const clock = w.clock!;
  assert.equal([clock.requests, clock.steps], [0, 0], "no clock request after it");
  assert.ok(
    clock.counted_seconds! >= 0.25 && clock.counted_seconds! >= k.stages[0].build_seconds,
    `counted ${clock.counted_seconds} s (the stage's round and its ${k.stages[0].build_seconds} s)`,
  );
  assert.ok(w.seconds < clock.counted_seconds!, "the warm-up's seconds leave the stage out");
  // the design's warm-up request (5 steps), then the stage's step of 212 tokens
  assert.is(b.model.batches[5].tokenIds.length, 212);
  assert.ok(
    b.logs.some((l) =>
      /^warm-up: 0 request\(s\) .* after 0\.\d\d s of the first point's kvwarm stage/.test(l)
    ),
  );
});

test("--kvwarm-step-tokens at the engine's budget builds the chains in the budget's steps", async () => {
  const b = kvwarmBench(MANIFEST, { kvwarmStepTokens: 64 }, { maxModelLen: 128 });
  const a = await runKvwarmBench(b);
  assert.equal(checkArtifact(a), []);
  assert.equal(a.kvwarm.stages.map((s) => s.step_tokens), [64, 64, 64]);
  assert.ok(b.logs.includes("kvwarm: stage batch=4 settled locally (ok=true) at round 9"));
  assert.ok(b.model.batches.every((x) => x.tokenIds.length <= 64));
});

test("a stage the group fails: every point of the rung falls back to fake KV with the reason; the next rung still extends its chains", async () => {
  const group = new PeerGroup(() => "done", (batch) => batch !== 4);
  const b = kvwarmBench(MANIFEST, {}, { maxModelLen: 128 });
  const a = await b.run.run(
    { engine: b.engine, engineInfo: MOE_ENGINE_INFO, tokenizer: qwen3Tokenizer },
    { stageSettlement: group },
  );
  assert.equal(checkArtifact(a), []);
  assert.equal(rows(a).slice(0, 4), [
    ["decode:B4:K200", "fake_fallback", 3, "fake_kv_injection"],
    ["decode:B4:K40", "fake_fallback", 3, "fake_kv_injection"],
    ["decode:B2:K120", "real_kv", 3, "kvwarm_shadow"],
    ["decode:B1:K100", "real_kv", 3, "kvwarm_shadow"],
  ]);
  const k = a.kvwarm;
  assert.equal(k.settlement, "group");
  assert.equal(k.stages.map((s) => [s.batch, s.ok, s.reason, s.tokens_reused]), [
    [4, false, "peer_stage_failed: another rank's build failed", 0],
    [2, true, null, 104],
    [1, true, null, 60],
  ]);
  assert.equal(k.point_fallbacks.map((f) => [f.point_key, f.reason]), [
    ["decode:B4:K200", "stage_failed: peer_stage_failed: another rank's build failed"],
    ["decode:B4:K40", "stage_failed: peer_stage_failed: another rank's build failed"],
    ["decode:B1:K126", k.point_fallbacks[2].reason],
  ]);
  assert.equal([k.points_real_kv, k.points_fake_fallback], [2, 3]);
});

test("a peer still building: this rank keeps stepping, and the stage settles in the round where the peer is done", async () => {
  const local = kvwarmBench(MANIFEST, {}, { maxModelLen: 128 });
  const alone = await runKvwarmBench(local);
  const group = new PeerGroup((_b, n) => (n <= 8 ? "building" : "done"), () => true);
  const b = kvwarmBench(MANIFEST, {}, { maxModelLen: 128 });
  const a = await b.run.run(
    { engine: b.engine, engineInfo: MOE_ENGINE_INFO, tokenizer: qwen3Tokenizer },
    { stageSettlement: group },
  );
  assert.equal(checkArtifact(a), []);
  assert.equal(rows(a), rows(alone), "the same points, regimes and methods");
  // every stage settles in its ninth round: the peer reported building in eight
  const settled = group.verdicts.filter(([, batch, allDone]) => batch !== null && allDone);
  assert.equal(settled.map(([, batch, , ok]) => [batch, ok]), [[4, true], [2, true], [1, true]]);
  assert.equal(a.kvwarm.stages.map((s) => s.steps), [9, 9, 9]);
  assert.ok(alone.kvwarm.stages.every((s) => s.steps < 9), "alone, each settles sooner");
  assert.equal(
    a.kvwarm.stages.map((s) => s.settle_round),
    settled.map(([seq]) => seq),
  );
  assert.equal([...new Set(group.verdicts.map(([, batch]) => batch))], [4, 2, 1]);
});

test("the soft timeout before the first build: the stage fails, the rung's first point runs on fake KV, the run ends partial", async () => {
  const b = kvwarmBench(MANIFEST, { softTimeoutSeconds: 0 }, { maxModelLen: 128 });
  const a = await runKvwarmBench(b);
  assert.equal(checkArtifact(a), []);
  assert.equal([a.status, a.stop_reason, a.valid, a.usable], [
    "partial",
    "soft_timeout",
    true,
    false,
  ]);
  assert.equal(rows(a), [["decode:B4:K200", "fake_fallback", 3, "fake_kv_injection"]]);
  assert.equal(a.kvwarm.stages.map((s) => [s.batch, s.ok, s.reason, s.tokens_computed]), [
    [4, false, "soft_timeout: the soft timeout passed before the build", 0],
  ]);
  assert.equal(b.engine.kvUsage().inUse, 0);
});

/** A seeder on its own engine and driver (256 blocks, model length 256); its log lines. */
function lonelySeeder(
  options: Partial<Omit<KvwarmSeederOptions, "late">> & { late: (d: StepDriver) => boolean },
) {
  const { engine } = cpuEngine({ numBlocks: 256, maxModelLen: 256, strictKv: false });
  const driver = new StepDriver(engine);
  const logs: string[] = [];
  const seeder = new KvwarmSeeder({
    engine,
    gate: eligibleGate(engine),
    capacity: () => benchCapacity(engine),
    samples: 3,
    settlement: new LocalStageSettlement((l) => logs.push(l)),
    rank: 0,
    cow: true,
    log: (l) => logs.push(l),
    ...options,
    late: () => options.late(driver),
  });
  return { engine, driver, logs, seeder };
}

test("a building stage logs its progress: tokens held of the chains', seconds and ETA", async () => {
  const { driver, logs, seeder } = lonelySeeder({
    late: () => false,
    stageTokens: 64,
    progressSeconds: 0, // a line after every step of the build
  });
  const points: DecodePoint[] = orderDecode([decodePoint(2, 400)]);
  seeder.order(points);
  await seeder.beforePoint(points[0], driver);
  const stage = seeder.section().stages[0];
  assert.ok(stage.ok);
  const lines = logs.filter((l) => /^kvwarm: stage B2: \d+ of \d+ tokens/.test(l));
  const total = 2 * stage.depth;
  assert.ok(lines.length >= 3, `${lines.length} progress lines over ${stage.steps} steps`);
  const held = lines.map((l) => Number(/: (\d+) of (\d+)/.exec(l)![1]));
  assert.ok(held.every((t, i) => t <= total && (i === 0 || t >= held[i - 1])), `held ${held}`);
  assert.ok(lines.every((l) => l.includes(` of ${total} tokens (`) && / s, ETA /.test(l)));
  await seeder.finish(driver);
});

test("the soft timeout mid-build: chains shed through the finish path, the fence drained before the point, the cache reset at the end", async () => {
  const { engine, driver, seeder } = lonelySeeder({
    late: (d) => d.seq >= 1, // passes after the first idle step of the build
    stageTokens: 128,
  });
  const points: DecodePoint[] = orderDecode([decodePoint(2, 400), decodePoint(1, 60)]);
  seeder.order(points);
  await seeder.beforePoint(points[0], driver);
  const stage = seeder.section().stages[0];
  assert.equal([stage.batch, stage.ok, stage.reason, stage.steps, stage.step_tokens], [
    2,
    false,
    "soft_timeout: the soft timeout passed mid-build",
    1,
    128,
  ]);
  assert.is(engine.stepTokenBudget, 64, "the engine's own budget again after the failed build");
  assert.ok(stage.tokens_computed > 0 && stage.tokens_computed < 2 * stage.depth);
  const u = engine.kvUsage();
  assert.equal([u.pendingFree, u.inUse], [0, 0], "shed and drained before the point");
  assert.not.ok(engine.hasUnfinishedRequests(), "no shed chain is re-admitted");
  assert.is(seeder.regime(points[0]), "fake_fallback");
  const reqs = decodePlan(400, 2).map((s, slot) => ({
    requestId: `m${slot}`,
    slot,
    prompt: new Int32Array(s.promptTokens).fill(7),
    computed: s.computed,
    cacheSalt: `m${slot}`,
    maxTokens: 4,
  }));
  const seeded = seeder.seed(engine, reqs);
  assert.ok(seeded.ok && seeded.method === "fake_kv_injection");
  await driver.drain();
  await seeder.finish(driver);
  assert.equal(engine.kvUsage().cached, 0, "the prefix cache was reset");
  assert.equal(seeder.section().point_fallbacks.map((f) => f.reason), [
    "stage_failed: soft_timeout: the soft timeout passed mid-build",
  ]);
});

test("a real-KV point skipped after its seeding is not counted in the kvwarm section", async () => {
  const b = kvwarmBench({
    schema_version: 1,
    decode: [{ batch_size: 2, total_kv_read_tokens: 40 }],
  });
  let shed = false;
  const artifact = await b.run.run(
    { engine: b.engine, engineInfo: MOE_ENGINE_INFO, tokenizer: qwen3Tokenizer },
    {
      hooks: [{
        afterStep: (_seq, o) => {
          // the replica's admission step: one of its shadows goes, so the steady step has
          // another shape and the point is skipped
          const id = "bench:test-run:dp0:1:replica0:1";
          if (!shed && o !== null && o.numPrefillRequests === 2 && b.engine.getRequest(id)) {
            shed = true;
            b.engine.shed(id);
          }
        },
      }],
    },
  );
  assert.ok(shed, "the replica's shadow was shed");
  assert.equal([artifact.results.length, artifact.skipped_points.length], [0, 1]);
  assert.equal([artifact.kvwarm.points_real_kv, artifact.kvwarm.points_fake_fallback], [0, 0]);
});

test.run();
