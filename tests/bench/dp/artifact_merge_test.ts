/**
 * The merged view of a group's artifacts: every rank's rows per point, the worst status,
 * the root cause's error, and refusals when the artifacts are not of one group's run.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { rmSync, writeFileSync } from "node:fs";
import type { BenchArtifact } from "../../../src/bench/artifact.ts";
import { checkArtifact } from "../../../src/bench/artifact_check.ts";
import {
  MergeError,
  mergeRankArtifacts,
  mergeRankFiles,
} from "../../../src/bench/dp/artifact_merge.ts";
import { rankOutPath } from "../../../src/bench/dp/rank_out_path.ts";
import { runGroup } from "./group_harness.ts";

const MANIFEST = {
  schema_version: 1,
  decode: [{ batch_size: 2, total_kv_read_tokens: 20 }, {
    batch_size: 1,
    total_kv_read_tokens: 12,
  }],
  prefill: [{ batch_size: 2, total_prefill_tokens: 16, total_kv_read_tokens: 0 }],
};

const g = await runGroup(2, MANIFEST);
const [r0, r1] = g.files;

test("every rank's rows per point, in rank order; rank 0's identity and group walls", () => {
  const m = mergeRankArtifacts([r0, r1]);
  assert.equal(checkArtifact(m), []);
  assert.equal([m.status, m.rank, m.dp_size, m.usable], ["complete", 0, 2, true]);
  assert.equal(m.results.map((r) => r.fpms.map((f) => f.rank)), [[0, 1], [0, 1], [0, 1]]);
  assert.equal(m.iteration_groups, r0.iteration_groups);
  assert.is(m.coverage.points_measured, 3);
});

test("a rank that stopped early: the view stops at its last point, with the worst status", () => {
  const short: BenchArtifact = {
    ...r1,
    status: "partial",
    stop_reason: "interrupted",
    valid: true,
    usable: false,
    results: r1.results.slice(0, 1),
    iteration_groups: r1.iteration_groups.slice(0, 1),
    error: { kind: "interrupted", message: "interrupted by SIGINT", benchmark_id: 2, stack: null },
  };
  const m = mergeRankArtifacts([r0, short]);
  assert.equal(checkArtifact(m), []);
  assert.equal([m.status, m.stop_reason, m.results.length], ["partial", "interrupted", 1]);
  assert.is(m.error!.message, "rank 1: interrupted by SIGINT");
  assert.equal([m.coverage.points_measured, m.coverage.points_not_run], [1, 2]);
  assert.equal(m.attention_dp!.merged_ranks!.map((s) => [s.status, s.points_measured]), [
    ["complete", 3],
    ["partial", 1],
  ]);
});

test("a rank with no artifact: failed, no group rows, and its absence named", () => {
  rmSync(rankOutPath(g.out, 1));
  const m = mergeRankFiles(g.out, 2);
  assert.equal(checkArtifact(m), []);
  assert.equal([m.status, m.results.length], ["failed", 0]);
  assert.is(m.error!.message, "rank 1: left no artifact");
  assert.equal(m.attention_dp!.merged_ranks![1].error, "no artifact");
  writeFileSync(rankOutPath(g.out, 1), JSON.stringify(r1));
});

test("artifacts of different grids, ranks or group sizes, or not artifacts at all, are refused", () => {
  assert.throws(
    () => mergeRankArtifacts([r0, { ...r1, grid_digest: "f".repeat(64) }]),
    (e: Error) =>
      e instanceof MergeError && /planned different grids: rank 0 \w+, rank 1 f+/.test(e.message),
  );
  assert.throws(() => mergeRankArtifacts([r1, r0]), /given as rank 0 is rank 1's/);
  assert.throws(() => mergeRankArtifacts([r0, r1, null]), /says dp_size 2, the group has 3/);
  assert.throws(() => mergeRankArtifacts([null, null]), /no rank left an artifact/);
  writeFileSync(rankOutPath(g.out, 1), JSON.stringify({ ...r1, results: "none" }));
  assert.throws(
    () => mergeRankFiles(g.out, 2),
    /_dp1\.json: not a benchmark artifact: artifact\.results/,
  );
  writeFileSync(rankOutPath(g.out, 1), "{");
  assert.throws(() => mergeRankFiles(g.out, 2), /_dp1\.json: not JSON/);
});

test.run();
