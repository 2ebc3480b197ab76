/**
 * The measurement protocol, over the engine's CPU test double (every number below is
 * exact): decode rows are the steady step, not the admission step; median-of-N keeps
 * its raw samples; fake KV and fake prefixes are prepared outside the timed step;
 * replicas, benchmark ids, pool balance, skips, soft timeout, interrupt, failure,
 * checkpoints, and the hooks kvwarm and attention-DP plug into.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BenchArtifact, DecodePoint, KvwarmSection } from "../../src/bench/artifact.ts";
import { checkArtifact } from "../../src/bench/artifact_check.ts";
import { type DecodeSeeder, FakeKvSeeder } from "../../src/bench/decode_seeder.ts";
import { ManifestError } from "../../src/bench/manifest.ts";
import type { PointSynchronizer } from "../../src/bench/point_synchronizer.ts";
import type { PrefixSeeder } from "../../src/bench/prefix_seeder.ts";
import { RankSynchronizer } from "../../src/dp/rank_synchronizer.ts";
import { cpuBench, readArtifact, runCpuBench } from "./bench_harness.ts";

const DECODE_B2_K20 = { schema_version: 1, decode: [{ batch_size: 2, total_kv_read_tokens: 20 }] };

function valid(a: BenchArtifact): void {
  assert.equal(checkArtifact(a), [], "the artifact checks against its types");
}

test("a decode row records its steady step, not the admission step", async () => {
  const b = cpuBench(DECODE_B2_K20);
  const { artifact } = await runCpuBench(b);
  valid(artifact);
  const [r] = artifact.results;
  const f = r.fpms[0];
  // ctx [10, 10] -> admitted at 9 computed tokens each: the admission step computes
  // position 9 of both (2 prefill tokens reading 18), the steady step decodes reading 20
  assert.equal(
    [f.num_decode_requests, f.sum_decode_kv_tokens, f.num_prefill_requests, f.sum_prefill_tokens],
    [2, 20, 0, 0],
  );
  const m = f.benchmark_measurement;
  const adm = m.admission!;
  assert.equal(
    [
      adm.num_prefill_requests,
      adm.sum_prefill_tokens,
      adm.sum_prefill_kv_tokens,
      adm.num_decode_requests,
    ],
    [2, 2, 18, 0],
  );
  assert.is(m.samples.length, 1);
  assert.is(m.samples[0].step_id, adm.step_id + 1);
  // the admission goes to the GPU in one submit (its early finish would be seen late)
  assert.is(b.model.batches[adm.step_id - 1].oneSubmit, true);
  assert.is(b.model.batches[adm.step_id].oneSubmit, undefined);
  assert.equal(m.estimate.method, "single_sample");
  assert.equal(m.prompts.map((p) => [p.prompt_tokens, p.computed_tokens]), [[10, 9], [10, 9]]);
  assert.is(m.preparation.method, "fake_kv_injection");
  assert.is(
    m.preparation.blocks,
    2 * 3,
    "10 tokens each in blocks of 4, taken in the untimed window",
  );
  assert.is(r.kv_seed_regime, "legacy");
  assert.equal(artifact.measurement_policy, {
    decode: "steady_state_second_step",
    prefill: "single_step",
  });
});

test("points at or above the giant threshold run median-of-3: three raw samples, upper median, method named", async () => {
  const b = cpuBench({
    schema_version: 1,
    decode: [{ batch_size: 2, total_kv_read_tokens: 20 }, {
      batch_size: 2,
      total_kv_read_tokens: 8,
    }],
    prefill: [{ batch_size: 2, total_prefill_tokens: 8, total_kv_read_tokens: 16 }],
  }, { policy: { repeats: 3, giantKvThreshold: 16 } });
  const { artifact } = await runCpuBench(b);
  valid(artifact);
  const [giant, small, prefill] = artifact.results;
  const g = giant.fpms[0].benchmark_measurement;
  assert.is(giant.repeats, 3);
  assert.is(g.samples.length, 3);
  assert.equal(
    g.samples.map((s) => s.sum_decode_kv_tokens),
    [20, 22, 24],
    "each steady step reads B more",
  );
  assert.equal(g.samples.map((s) => s.step_id), [
    g.admission!.step_id + 1,
    g.admission!.step_id + 2,
    g.admission!.step_id + 3,
  ]);
  assert.is(g.estimate.method, "upper_median");
  assert.is(g.estimate.median_of, 3);
  const walls = g.samples.map((s) => s.wall_time);
  const sorted = [...walls].sort((x, y) => x - y);
  assert.is(g.estimate.wall_time, sorted[1]);
  assert.is(walls[g.estimate.sample_indices[0]], sorted[1]);
  assert.is(giant.fpms[0].wall_time, sorted[1]);
  assert.is(small.repeats, 1, "below the threshold: one steady step");
  // prefill reading 16 KV tokens: three shots, each with fresh cache salts
  const p = prefill.fpms[0].benchmark_measurement;
  assert.is(p.samples.length, 3);
  assert.equal(p.prompts.map((x) => x.shot), [0, 0, 1, 1, 2, 2]);
  assert.is(new Set(p.prompts.map((x) => x.cache_salt)).size, 6);
  assert.is(new Set(p.prompts.map((x) => x.sha256)).size, 2, "same content per slot in every shot");
  assert.equal(artifact.measurement_protocol.median.repeats, 3);
});

test("benchmark ids are 1..N in execution order: decode batch desc, KV desc, then prefill largest first", async () => {
  const { artifact } = await runCpuBench(cpuBench({
    schema_version: 1,
    prefill: [
      { batch_size: 1, total_prefill_tokens: 8, total_kv_read_tokens: 0 },
      { batch_size: 2, total_prefill_tokens: 32, total_kv_read_tokens: 8 },
    ],
    decode: [{ batch_size: 1, total_kv_read_tokens: 30 }, {
      batch_size: 4,
      total_kv_read_tokens: 8,
    }, {
      batch_size: 1,
      total_kv_read_tokens: 60,
    }],
  }));
  valid(artifact);
  assert.equal(artifact.results.map((r) => [r.benchmark_id, r.point_key]), [
    [1, "decode:B4:K8"],
    [2, "decode:B1:K60"],
    [3, "decode:B1:K30"],
    [4, "prefill:B2:T32:K8"],
    [5, "prefill:B1:T8:K0"],
  ]);
  assert.equal(artifact.iteration_groups.map((g) => g.benchmark_id), [1, 2, 3, 4, 5]);
  assert.is(artifact.coverage.points_planned, 5);
  assert.equal(artifact.coverage.regimes, { legacy: 3, fake_prefix: 1, not_applicable: 1 });
  assert.is(artifact.status, "complete");
  assert.ok(artifact.usable);
  assert.match(artifact.grid_digest!, /^[0-9a-f]{64}$/);
});

test("the KV pool balances around every point, and every request had its own cache_salt", async () => {
  const b = cpuBench({
    schema_version: 1,
    decode: [{ batch_size: 4, total_kv_read_tokens: 100 }, {
      batch_size: 3,
      total_kv_read_tokens: 10,
    }],
    prefill: [{ batch_size: 3, total_prefill_tokens: 30, total_kv_read_tokens: 24 }],
  });
  const { artifact } = await runCpuBench(b);
  valid(artifact);
  for (const r of artifact.results) {
    assert.is(r.kv_pool.blocks_total, 255);
    assert.is(r.kv_pool.blocks_free_after, r.kv_pool.blocks_free_before, r.point_key);
  }
  assert.is(b.engine.kvUsage().inUse, 0);
  const salts = artifact.results.flatMap((r) =>
    r.fpms[0].benchmark_measurement.prompts.map((p) => p.cache_salt)
  );
  assert.is(new Set(salts).size, salts.length);
  assert.is(salts.length, 4 + 3 + 3);
});

test("fake prefix: the measuring requests hit exactly the injected prefix blocks", async () => {
  const { artifact } = await runCpuBench(cpuBench({
    schema_version: 1,
    prefill: [{ batch_size: 2, total_prefill_tokens: 10, total_kv_read_tokens: 12 }],
  }));
  valid(artifact);
  const f = artifact.results[0].fpms[0];
  // 3 blocks of 4 -> prefixes [8, 4]; new tokens [5, 5]
  assert.equal([f.num_prefill_requests, f.sum_prefill_tokens, f.sum_prefill_kv_tokens], [
    2,
    10,
    12,
  ]);
  const m = f.benchmark_measurement;
  assert.equal(m.prompts.map((p) => [p.prompt_tokens, p.computed_tokens]), [[13, 8], [9, 4]]);
  assert.equal([m.preparation.method, m.preparation.blocks, m.preparation.prefix_hit_tokens], [
    "fake_prefix",
    3,
    12,
  ]);
  assert.is(artifact.results[0].kv_seed_regime, "fake_prefix");
  assert.is(m.admission, null);
});

test("a prefix miss skips the point with its reason; the run goes on", async () => {
  const seedsNothing: PrefixSeeder = {
    regime: () => "fake_prefix",
    seed: () => Promise.resolve({ ok: true, method: "nothing", blocks: 0 }),
  };
  const { artifact } = await runCpuBench(
    cpuBench({
      schema_version: 1,
      prefill: [{ batch_size: 1, total_prefill_tokens: 4, total_kv_read_tokens: 8 }],
      decode: [{ batch_size: 1, total_kv_read_tokens: 9 }],
    }),
    { prefixSeeder: seedsNothing },
  );
  valid(artifact);
  assert.equal(artifact.results.map((r) => r.benchmark_id), [1]);
  assert.equal(artifact.skipped_points.map((s) => [s.benchmark_id, s.kv_seed_regime]), [[
    2,
    "fake_prefix",
  ]]);
  assert.match(
    artifact.skipped_points[0].reason,
    /^replica: fake_prefix_miss: slot 0 hit 0 of 8 prefix tokens/,
  );
  assert.equal([artifact.status, artifact.valid, artifact.usable], ["complete", true, false]);
  assert.is(artifact.coverage.points_skipped, 1);
});

test("a new shape runs one discarded replica first; a known shape does not", async () => {
  const { artifact } = await runCpuBench(cpuBench({
    schema_version: 1,
    decode: [
      { batch_size: 2, total_kv_read_tokens: 40 },
      { batch_size: 2, total_kv_read_tokens: 20 },
      { batch_size: 1, total_kv_read_tokens: 20 },
    ],
    prefill: [
      { batch_size: 1, total_prefill_tokens: 8, total_kv_read_tokens: 4 },
      { batch_size: 1, total_prefill_tokens: 8, total_kv_read_tokens: 0 },
    ],
  }));
  valid(artifact);
  assert.equal(
    artifact.results.map((r) => {
      const p = r.fpms[0].benchmark_measurement.preparation;
      return [r.point_key, p.shape_key, p.replica];
    }),
    [
      ["decode:B2:K40", "decode:2", true],
      ["decode:B2:K20", "decode:2", false],
      ["decode:B1:K20", "decode:1", true],
      ["prefill:B1:T8:K4", "prefill:1:8", true],
      ["prefill:B1:T8:K0", "prefill:1:8", false],
    ],
  );
  const replicaSalt = /:replica0:/;
  for (const r of artifact.results) {
    assert.not.ok(
      r.fpms[0].benchmark_measurement.prompts.some((p) => replicaSalt.test(p.cache_salt)),
    );
  }
});

test("the warm-up runs one 16-token prompt for 5 steps before the first point", async () => {
  const b = cpuBench(DECODE_B2_K20);
  const { artifact } = await runCpuBench(b);
  assert.equal(artifact.measurement_protocol.preparation.warmup!.prompt_tokens, 16);
  assert.equal(artifact.measurement_protocol.preparation.warmup!.steps, 5);
  assert.equal(
    b.model.batches[0].tokenIds.length,
    16,
    "the first step of the run is the warm-up's prefill",
  );
});

test("the clock warm-up keeps the engine busy with salted requests until --warmup-s passed", async () => {
  const b = cpuBench(DECODE_B2_K20, { warmupSeconds: 0.25 });
  const { artifact } = await runCpuBench(b);
  valid(artifact);
  const w = artifact.measurement_protocol.preparation.warmup!;
  assert.equal([w.prompt_tokens, w.steps], [16, 5], "the design's warm-up first");
  const clock = w.clock!;
  assert.ok(w.seconds >= 0.25, `warm-up lasted ${w.seconds} s`);
  assert.ok(clock.requests >= 1);
  assert.equal([clock.min_seconds, clock.prompt_tokens, clock.steps], [
    0.25,
    64, // the step budget of the CPU double's engine (below 2048)
    2 * clock.requests,
  ]);
  // each clock request computed its whole prompt: no prefix hit on another's blocks
  const clockPrefills = b.model.batches.slice(5, 5 + 2 * clock.requests).filter((x) =>
    x.tokenIds.length === 64
  );
  assert.is(clockPrefills.length, clock.requests);
  // without it (the CPU double's default, as a CPU adapter's) none runs
  const none = cpuBench(DECODE_B2_K20);
  const plain = (await runCpuBench(none)).artifact.measurement_protocol.preparation.warmup!;
  assert.is(plain.clock, null);
});

test("the soft timeout ends the clock warm-up too: it runs from the sweep's start", async () => {
  const b = cpuBench(DECODE_B2_K20, { warmupSeconds: 3600, softTimeoutSeconds: 0.2 });
  const { artifact } = await runCpuBench(b);
  valid(artifact);
  const clock = artifact.measurement_protocol.preparation.warmup!.clock!;
  assert.is(clock.ended, "stop");
  assert.ok(clock.seconds < 30, `the clock warm-up stopped at the deadline (${clock.seconds} s)`);
  // the one point still runs (the first always does), and with it every point ran
  assert.equal([artifact.status, artifact.stop_reason], ["complete", "complete"]);
  assert.ok(
    b.logs.some((l) => /^warm-up: .* ended by the group's vote or the soft timeout\)$/.test(l)),
  );
});

test("the soft timeout is checked at point boundaries and ends the run partial", async () => {
  const b = cpuBench({
    schema_version: 1,
    decode: [1, 2, 3].map((i) => ({ batch_size: 1, total_kv_read_tokens: 10 * i })),
  }, { softTimeoutSeconds: 1e-9 });
  const { artifact, file } = await runCpuBench(b);
  valid(artifact);
  assert.equal([artifact.status, artifact.stop_reason, artifact.valid], [
    "partial",
    "soft_timeout",
    true,
  ]);
  assert.is(artifact.results.length, 1, "the first point still runs to its end");
  assert.is(artifact.coverage.points_not_run, 2);
  assert.equal(file, artifact);
});

test("a soft timeout passed during the last point leaves the run complete: every point ran", async () => {
  const b = cpuBench({
    schema_version: 1,
    decode: [{ batch_size: 1, total_kv_read_tokens: 10 }],
  }, { softTimeoutSeconds: 1e-9 });
  const { artifact } = await runCpuBench(b);
  valid(artifact);
  assert.is(artifact.results.length, 1);
  assert.is(artifact.coverage.points_not_run, 0);
  assert.equal([artifact.status, artifact.stop_reason, artifact.usable], [
    "complete",
    "complete",
    true,
  ]);
});

test("an --out that cannot take the artifact is refused before any step runs", async () => {
  const out = mkdtempSync(join(tmpdir(), "webfpm-out-folder-"));
  const b = cpuBench({
    schema_version: 1,
    decode: [1, 2, 3].map((i) => ({ batch_size: 1, total_kv_read_tokens: 10 * i })),
  }, { out });
  const err = await runCpuBench(b).then(() => null, (e: Error) => e);
  assert.match(err?.message ?? "", /cannot write the artifact .*: it is a folder/);
  assert.is(b.model.batches.length, 0, "no step ran");
  assert.ok(b.logs.some((l) => /^bench: no artifact written: /.test(l)));
});

test("a checkpoint after an interrupt leaves the interrupted artifact on disk", async () => {
  // a peer rank's Ctrl-C calls run.interrupt and the sweep finishes the point in progress,
  // whose checkpoint must not replace the interrupted artifact
  const b = cpuBench({
    schema_version: 1,
    decode: [1, 2, 3].map((i) => ({ batch_size: 1, total_kv_read_tokens: 10 * i })),
  }, { checkpointEvery: 1 });
  let interrupted = false;
  const { artifact, file } = await runCpuBench(b, {
    hooks: [{
      afterStep: () => {
        if (!interrupted && b.run.builder.results.length === 1) {
          interrupted = true;
          b.run.interrupt("SIGINT");
        }
      },
    }],
  });
  assert.ok(interrupted);
  assert.is(artifact.stop_reason, "interrupted");
  assert.equal([file.stop_reason, file.error?.kind ?? null], ["interrupted", "interrupted"]);
});

test("an interrupt writes a partial artifact at once that keeps the measured points", async () => {
  const b = cpuBench({
    schema_version: 1,
    decode: [1, 2, 3].map((i) => ({ batch_size: 1, total_kv_read_tokens: 10 * i })),
  });
  let written: BenchArtifact | null = null;
  const { artifact, file } = await runCpuBench(b, {
    hooks: [{
      afterStep: () => {
        // interrupted while point 2 (the second in order, K=20) is measured
        if (written === null && b.run.builder.results.length === 1) {
          written = b.run.interrupt("SIGINT");
        }
      },
    }],
  });
  valid(artifact);
  assert.equal(artifact, written);
  assert.equal(file, written);
  assert.equal([artifact.status, artifact.stop_reason], ["partial", "interrupted"]);
  assert.equal(artifact.error, {
    kind: "interrupted",
    message: "interrupted by SIGINT during benchmark_id=2",
    benchmark_id: 2,
    stack: null,
  });
  assert.equal(artifact.results.map((r) => r.point_key), ["decode:B1:K30"]);
});

test("a failure writes a failed artifact that keeps the measured points", async () => {
  const b = cpuBench({
    schema_version: 1,
    decode: [1, 2].map((i) => ({ batch_size: 1, total_kv_read_tokens: 10 * i })),
  });
  const fake = new FakeKvSeeder({ requested: "off", skipReason: "flag_off" });
  let calls = 0;
  const failing: DecodeSeeder = {
    order: (p) => fake.order(p),
    regime: (p) => fake.regime(p),
    beforePoint: (p, d) => fake.beforePoint(p, d),
    seed: (engine, reqs) => {
      if (++calls === 3) throw new Error("the GPU fell off the bus");
      return fake.seed(engine, reqs);
    },
    finish: (d) => fake.finish(d),
    section: (): KvwarmSection => fake.section(),
  };
  const err = await runCpuBench(b, { decodeSeeder: failing }).then(() => null, (e: Error) => e);
  assert.match(err?.message ?? "resolved", /fell off the bus/);
  const file = readArtifact(b.out);
  assert.equal(checkArtifact(file), []);
  assert.equal([file.status, file.stop_reason, file.valid, file.usable], [
    "failed",
    "error",
    false,
    false,
  ]);
  assert.equal([file.error!.kind, file.error!.benchmark_id], ["runtime", 2]);
  assert.match(file.error!.stack!, /fell off the bus/);
  assert.equal(file.results.map((r) => r.point_key), ["decode:B1:K20"]);
});

test("checkpoints: every N points the artifact on disk is a partial checkpoint", async () => {
  const b = cpuBench({
    schema_version: 1,
    decode: [1, 2, 3].map((i) => ({ batch_size: 1, total_kv_read_tokens: 10 * i })),
  }, { checkpointEvery: 2 });
  const seen: [string, number][] = [];
  await runCpuBench(b, {
    hooks: [{
      afterStep: () => {
        if (existsSync(b.out)) {
          const a = readArtifact(b.out);
          const s: [string, number] = [a.stop_reason, a.results.length];
          if (!seen.some((x) => x[0] === s[0] && x[1] === s[1])) seen.push(s);
        }
      },
    }],
  });
  assert.equal(seen, [["checkpoint", 2]]);
  assert.is(readArtifact(b.out).stop_reason, "complete");
  assert.is(b.run.writer.writes, 2);
});

test("explicit points the engine cannot hold: an error naming point and field, a failed artifact", async () => {
  const b = cpuBench({
    schema_version: 1,
    decode: [{ batch_size: 9, total_kv_read_tokens: 20 }, {
      batch_size: 1,
      total_kv_read_tokens: 500,
    }],
    prefill: [{ batch_size: 1, total_prefill_tokens: 100, total_kv_read_tokens: 6 }],
  });
  try {
    await runCpuBench(b);
    assert.unreachable("the run started");
  } catch (err) {
    assert.instance(err, ManifestError);
    const p = (err as ManifestError).problems;
    assert.ok(
      p.includes("decode[0].batch_size (decode:B9:K20): 9 requests exceed max_num_seqs 8"),
      p.join("\n"),
    );
    assert.ok(
      p.some((x) =>
        /^decode\[1\]\.total_kv_read_tokens \(decode:B1:K500\): .* > max_model_len 128/.test(x)
      ),
    );
    assert.ok(
      p.some((x) => /^prefill\[0\]\.total_prefill_tokens .* max_batched_tokens is 64/.test(x)),
    );
    assert.ok(
      p.some((x) =>
        /^prefill\[0\]\.total_kv_read_tokens .* not a whole number of 4-token blocks/.test(x)
      ),
    );
  }
  const file = readArtifact(b.out);
  assert.equal(checkArtifact(file), []);
  assert.equal([file.status, file.stop_reason, file.valid, file.error!.kind], [
    "failed",
    "input_error",
    false,
    "input",
  ]);
  assert.is(file.results.length, 0);
  assert.equal(b.model.batches.length, 0, "nothing ran");
});

test("the generated grid runs when no manifest is given (mode decode)", async () => {
  const b = cpuBench(null, {
    mode: "decode",
    grid: {
      preset: "smoke",
      limits: {
        decode_batch_samples: 2,
        decode_kv_samples: 2,
        prefill_token_samples: 2,
        prefill_batch_sizes: 1,
        prefill_kv_read_samples: 2,
      },
    },
  });
  const { artifact } = await runCpuBench(b);
  valid(artifact);
  // batch axis {1, 8}; B = 8: KV {16 (the steady coordinate of K = 8), the most the 255
  // blocks of 4 hold (8 x 126 would need 256)}; B = 1: {2, 126 (max_model_len 128 - 2)}
  assert.equal(artifact.results.map((r) => r.point_key), [
    "decode:B8:K991",
    "decode:B8:K16",
    "decode:B1:K126",
    "decode:B1:K2",
  ]);
  assert.equal(artifact.points_source, {
    kind: "generated",
    preset: "smoke",
    limits: b.run.options.grid.limits,
  });
});

test("step hooks see every step; idle-step hooks only the steps between points", async () => {
  const b = cpuBench(DECODE_B2_K20);
  const all: number[] = [], idle: number[] = [];
  const { artifact } = await runCpuBench(b, {
    hooks: [{ afterStep: (seq) => void all.push(seq), onIdleStep: (seq) => void idle.push(seq) }],
  });
  assert.equal(all, all.map((_, i) => i + 1), "seq counts every step");
  // warm-up: 5 steps, idle; then the point: the replica's admission and steady steps and
  // the measured shot's, none of them idle
  assert.is(artifact.measurement_protocol.preparation.warmup!.steps, 5);
  assert.equal(idle, [1, 2, 3, 4, 5]);
  assert.is(all.length, 9);
  assert.is(b.model.batches.length, 9, "every model step went through the hooks");
});

test("a point synchronizer sees READY, ARM, result, cleanup and the boundary vote for every point, in order", async () => {
  const calls: string[] = [];
  const sync: PointSynchronizer = {
    rank: 0,
    size: 1,
    agreeGridDigest: (d) => (calls.push("digest"), Promise.resolve(d)),
    ready: (id, key) => (calls.push(`ready ${id} ${key}`), Promise.resolve()),
    arm: (id, shape) => (calls.push(`arm ${id} ${JSON.stringify(shape)}`), Promise.resolve()),
    gatherResult: (
      id,
      walls,
    ) => (calls.push(`result ${id} ${walls.length}`),
      Promise.resolve({ iteration_walls: walls.map((w) => w * 2) })),
    cleanup: (id) => (calls.push(`cleanup ${id}`), Promise.resolve()),
    boundaryVote: (id, late) => (calls.push(`boundary ${id} ${late}`), Promise.resolve(false)),
    barrier: () => Promise.resolve(),
  };
  const { artifact } = await runCpuBench(
    cpuBench({
      schema_version: 1,
      decode: [{ batch_size: 2, total_kv_read_tokens: 20 }],
      prefill: [{ batch_size: 1, total_prefill_tokens: 4, total_kv_read_tokens: 0 }],
    }),
    { sync },
  );
  assert.equal(calls, [
    "digest",
    "ready 1 decode:B2:K20",
    'arm 1 {"batch_size":2,"total_prefill_tokens":0,"total_kv_read_tokens":20,"samples":1}',
    "result 1 1",
    "cleanup 1",
    "boundary 1 false",
    "ready 2 prefill:B1:T4:K0",
    'arm 2 {"batch_size":1,"total_prefill_tokens":4,"total_kv_read_tokens":0,"samples":1}',
    "result 2 1",
    "cleanup 2",
    "boundary 2 false",
  ]);
  const g = artifact.iteration_groups[0];
  assert.is(
    g.wall_time,
    artifact.results[0].fpms[0].wall_time * 2,
    "the group's wall is the gathered one",
  );
});

test("the dp module's RankSynchronizer is a point synchronizer: a group of one runs the sweep", async () => {
  const rank = await RankSynchronizer.open({
    rank: 0,
    size: 1,
    masterHost: "127.0.0.1",
    masterPort: 0,
    source: "flags",
  });
  const sync: PointSynchronizer = rank;
  const { artifact } = await runCpuBench(cpuBench(DECODE_B2_K20), { sync });
  await rank.finish();
  valid(artifact);
  assert.equal([artifact.status, artifact.results.length], ["complete", 1]);
  assert.equal(artifact.iteration_groups[0].iteration_walls, [
    artifact.results[0].fpms[0].wall_time,
  ]);
});

test("a decode seeder can order points and seed them its own way (the kvwarm hook)", async () => {
  const fake = new FakeKvSeeder({ requested: "on", skipReason: "test" });
  const staged: string[] = [];
  const reversed: DecodeSeeder = {
    order: (p: readonly DecodePoint[]) => [...fake.order(p)].reverse(),
    regime: () => "real_kv",
    beforePoint: (p) => (staged.push(`B${p.batch_size}`), Promise.resolve()),
    seed: (engine, reqs) => {
      const r = fake.seed(engine, reqs);
      return r.ok ? { ...r, method: "shadow" } : r;
    },
    finish: () => Promise.resolve(),
    section: () => ({ ...fake.section(), enabled: true, points_real_kv: 2 }),
  };
  const { artifact } = await runCpuBench(
    cpuBench({
      schema_version: 1,
      decode: [{ batch_size: 2, total_kv_read_tokens: 20 }, {
        batch_size: 1,
        total_kv_read_tokens: 9,
      }],
    }),
    { decodeSeeder: reversed },
  );
  valid(artifact);
  assert.equal(artifact.results.map((r) => [r.point_key, r.kv_seed_regime, r.repeats]), [
    ["decode:B1:K9", "real_kv", 3],
    ["decode:B2:K20", "real_kv", 3],
  ]);
  assert.equal(staged, ["B1", "B2"]);
  assert.is(artifact.results[0].fpms[0].benchmark_measurement.preparation.method, "shadow");
  assert.equal([artifact.kvwarm.enabled, artifact.kvwarm.points_real_kv], [true, 2]);
});

test("the ETA's pace leaves out a kvwarm stage built before a point", async () => {
  const fake = new FakeKvSeeder({ requested: "on", skipReason: "test" });
  let stages = 0;
  // a stage of 600 ms before the first point only (a rung's chains), none after
  const staging: DecodeSeeder = {
    order: (p: readonly DecodePoint[]) => fake.order(p),
    regime: () => "legacy",
    beforePoint: () => stages++ === 0 ? new Promise((r) => setTimeout(r, 600)) : Promise.resolve(),
    seed: (engine, reqs) => fake.seed(engine, reqs),
    finish: () => Promise.resolve(),
    section: () => fake.section(),
  };
  const decode = [1, 2, 3, 4].map((b) => ({ batch_size: b, total_kv_read_tokens: 9 * b }));
  const bench = cpuBench({ schema_version: 1, decode });
  const { artifact } = await runCpuBench(bench, { decodeSeeder: staging });
  valid(artifact);
  const etas = bench.logs.filter((l) => /^\[\d\/4\]/.test(l)).map((l) => {
    const [m, s] = /ETA (\d+):(\d+)$/.exec(l)!.slice(1).map(Number);
    return 60 * m + s;
  });
  // with the stage in its pace the first line would read 3 points x >= 0.6 s: 0:02 at least
  assert.is(etas.length, 4);
  assert.ok(etas[0] < 2, `first ETA ${etas[0]} s`);
});

test("checkArtifact finds what breaks the schema or its invariants", async () => {
  const { artifact } = await runCpuBench(cpuBench(DECODE_B2_K20));
  const broken = JSON.parse(JSON.stringify(artifact));
  broken.extra = 1;
  broken.results[0].kv_pool.blocks_free_after -= 1;
  broken.results[0].benchmark_id = 2;
  delete broken.timing.elapsed;
  broken.results[0].fpms[0].benchmark_measurement.prompts[0].sha256 = "nope";
  const problems = checkArtifact(broken);
  assert.ok(problems.includes("artifact.extra: not in the schema"), problems.join("\n"));
  assert.ok(problems.includes("artifact.timing.elapsed: missing"));
  assert.ok(problems.some((p) => /prompts\[0\]\.sha256: a sha256 hex digest/.test(p)));
  delete broken.extra;
  broken.timing.elapsed = 1;
  broken.results[0].fpms[0].benchmark_measurement.prompts[0].sha256 = "0".repeat(64);
  const invariants = checkArtifact(broken);
  assert.ok(invariants.some((p) => /not 1\.\.N/.test(p)), invariants.join("\n"));
  assert.ok(invariants.some((p) => /kv_pool does not balance/.test(p)));
});

test.run();
