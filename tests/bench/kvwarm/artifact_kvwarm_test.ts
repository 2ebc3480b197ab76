/**
 * The artifact's kvwarm section: what a kvwarm run writes checks against the types
 * (stages with tokens computed and reused, chains, point fallbacks, prefill real
 * seeding), and the checker names every way a section or a row's regime goes wrong.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BenchArtifact } from "../../../src/bench/artifact.ts";
import { checkArtifact } from "../../../src/bench/artifact_check.ts";
import { kvwarmOffSection } from "../../../src/bench/kvwarm/section.ts";
import { kvwarmBench, runKvwarmBench } from "./kvwarm_harness.ts";

const b = kvwarmBench(
  {
    schema_version: 1,
    decode: [{ batch_size: 2, total_kv_read_tokens: 40 }, {
      batch_size: 1,
      total_kv_read_tokens: 126,
    }],
  },
  {},
  { maxModelLen: 128 },
);
const artifact = await runKvwarmBench(b);

// deno-lint-ignore no-explicit-any
type Json = any;

/** A deep copy changed by `edit`. */
function changed(edit: (a: Json) => void): unknown {
  const a = JSON.parse(JSON.stringify(artifact));
  edit(a);
  return a;
}

test("a kvwarm run's section checks, with every field the design names", () => {
  assert.equal(checkArtifact(artifact), []);
  const k = artifact.kvwarm;
  assert.equal(Object.keys(k), [
    "enabled",
    "requested",
    "warm_eligible",
    "skip_reason",
    "dataset",
    "stages",
    "points_real_kv",
    "points_fake_fallback",
    "capacity_fallbacks",
    "shadow_tail",
    "settlement",
    "chains",
    "point_fallbacks",
    "prefill_real_seed",
  ]);
  assert.equal(Object.keys(k.stages[0]), [
    "batch",
    "depth",
    "build_seconds",
    "tokens_computed",
    "tokens_reused",
    "ok",
    "reason",
    "chains",
    "points",
    "blocks",
    "tail_blocks",
    "steps",
    "step_tokens",
    "settle_round",
  ]);
  assert.equal(
    [k.dataset!.package, k.dataset!.collection_pool, k.chains!.content_rule],
    ["nlp-corpus", "sha256(body)[0] even", "content-v1:{content_seed}:{rank}:{i}"],
  );
  assert.equal(checkArtifact({ ...artifact, kvwarm: kvwarmOffSection("off", "flag_off") }), [
    "benchmark_id=1: real_kv while kvwarm is not enabled",
  ]);
});

test("the checker names a missing, unknown or mistyped kvwarm field", () => {
  const cases: [(a: Json) => void, string][] = [
    [
      (a) => delete a.kvwarm.stages[0].tokens_reused,
      "artifact.kvwarm.stages[0].tokens_reused: missing",
    ],
    [(a) => (a.kvwarm.stages[0].extra = 1), "artifact.kvwarm.stages[0].extra: not in the schema"],
    [
      (a) => (a.kvwarm.shadow_tail = "copy"),
      'artifact.kvwarm.shadow_tail: one of cow, zero_fill, got "copy"',
    ],
    [(a) => delete a.kvwarm.prefill_real_seed, "artifact.kvwarm.prefill_real_seed: missing"],
    [
      (a) => (a.kvwarm.chains.probe_seconds = -1),
      "artifact.kvwarm.chains.probe_seconds: a non-negative number, got -1",
    ],
    [
      (a) => delete a.kvwarm.chains.prepare_seconds,
      "artifact.kvwarm.chains.prepare_seconds: missing",
    ],
    [
      (a) => (a.kvwarm.point_fallbacks[0].reason = 3),
      "artifact.kvwarm.point_fallbacks[0].reason: a string, got number",
    ],
  ];
  for (const [edit, problem] of cases) assert.equal(checkArtifact(changed(edit)), [problem]);
});

test("a row's regime must be of its kind, and real only where that seeding was on", () => {
  assert.equal(checkArtifact(changed((a) => (a.results[0].kv_seed_regime = "real_prefix"))), [
    "benchmark_id=1: decode point with regime real_prefix",
    "benchmark_id=1: real_prefix while prefill real seeding is not enabled",
  ]);
  assert.equal(checkArtifact(changed((a) => (a.results[0].kv_seed_regime = "warm"))), [
    'artifact.results[0].kv_seed_regime: a kv_seed_regime, got "warm"',
  ]);
  const a = artifact as BenchArtifact;
  assert.equal(a.results.map((r) => r.kv_seed_regime), ["real_kv", "fake_fallback"]);
});

test.run();
