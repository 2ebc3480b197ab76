/**
 * bench-compare's arithmetic: points matched by key and rank, relative differences of wall
 * and GPU time, counts within the bound, and the points one run lacks.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BenchArtifact } from "../../src/bench/artifact.ts";
import { absSpread, compareRuns } from "../../src/report/repeatability.ts";

function run(points: [string, number, number | null][]): BenchArtifact {
  return {
    results: points.map(([key, wall, gpu]) => ({
      point_key: key,
      fpms: [{
        rank: 0,
        wall_time: wall,
        gpu_time: gpu,
        benchmark_measurement: {
          estimate: { method: "upper_median", median_of: 3 },
        },
      }],
    })),
  } as unknown as BenchArtifact;
}

test("per-point differences, counts within the bound, unmatched points", () => {
  const a = run([["decode:B1:K2", 0.01, 0.009], ["decode:B8:K64", 0.02, 0.02], [
    "prefill:B1:T4:K0",
    0.1,
    null,
  ]]);
  const b = run([["decode:B1:K2", 0.0103, 0.009], ["decode:B8:K64", 0.0201, 0.0203], [
    "decode:B2:K2",
    0.01,
    0.01,
  ]]);
  const c = compareRuns(a, b, 0.02);
  assert.is(c.points.length, 2);
  const p = c.points.find((x) => x.key === "decode:B1:K2")!;
  assert.ok(Math.abs(p.wallDiff - 0.03) < 1e-12);
  assert.is(p.gpuDiff, 0);
  assert.is(p.method, "upper_median of 3");
  assert.is(c.wallWithin, 1, "3% is outside 2%, 0.5% inside");
  assert.is(c.gpuWithin, 2);
  assert.is(c.gpuCompared, 2);
  assert.equal(c.onlyA, ["prefill:B1:T4:K0"]);
  assert.equal(c.onlyB, ["decode:B2:K2"]);
  assert.throws(() => compareRuns(a, b, -1), /bound/);
});

test("absSpread: median and max of absolute values", () => {
  assert.equal(absSpread([-0.05, 0.01, 0.02]), { median: 0.02, max: 0.05 });
  assert.equal(absSpread([]), { median: 0, max: 0 });
});

test.run();
