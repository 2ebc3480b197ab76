/**
 * Where a group's artifacts go, and what the per-step barrier meter reports.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mergedOutPath, rankOutPath } from "../../../src/bench/dp/rank_out_path.ts";
import { StepRoundMeter } from "../../../src/bench/dp/step_round_meter.ts";
import { defaultSpinMs, localRanksOf } from "../../../src/bench/dp/dp_rank.ts";

test("rank r writes <stem>_dp<r>.json beside --out; the merged view is <stem>_merged.json", () => {
  assert.is(rankOutPath("/r/bench.json", 0), "/r/bench_dp0.json");
  assert.is(rankOutPath("/r/run.v2.json", 3), "/r/run.v2_dp3.json");
  assert.is(rankOutPath("/r/noext", 1), "/r/noext_dp1.json");
  assert.is(mergedOutPath("/r/bench.json"), "/r/bench_merged.json");
  assert.throws(() => rankOutPath("/r/x.json", -1), /bad rank/);
});

test("the meter: round percentiles, and step intervals only between consecutive barriers", () => {
  const meter = new StepRoundMeter();
  for (const us of [100, 200, 300, 400, 1000]) meter.record(us);
  meter.recordStep(9);
  meter.recordStep(11);
  const s = meter.summary();
  assert.equal([s.rounds, s.mean_us, s.p50_us, s.p90_us, s.max_us], [5, 400, 300, 1000, 1000]);
  assert.is(s.mean_step_ms, 10);
  assert.ok(Math.abs(s.share - 0.4 / 10.4) < 1e-12);
  assert.equal(new StepRoundMeter().summary(), {
    rounds: 0,
    mean_us: 0,
    p50_us: 0,
    p90_us: 0,
    max_us: 0,
    mean_step_ms: 0,
    share: 0,
  });
});

test("measure(): a step is the time from one barrier to the next, unless another round ran", async () => {
  const meter = new StepRoundMeter();
  const wait = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
  await meter.measure(() => Promise.resolve());
  await wait(20); // a step
  await meter.measure(() => Promise.resolve());
  meter.interrupt(); // e.g. a READY round: the next interval is not a step
  await wait(20);
  await meter.measure(() => Promise.resolve());
  const s = meter.summary();
  assert.is(s.rounds, 3);
  assert.ok(s.mean_step_ms >= 19, `one step of ~20 ms counted, got ${s.mean_step_ms}`);
  for (let i = 0; i < 2000; i++) meter.record(1); // grows past its first buffer
  assert.is(meter.summary().rounds, 2003);
});

test("waits spin only where every rank on the host has two cores; ranks per host from the launcher, Slurm or MPI", () => {
  assert.is(defaultSpinMs(2, 16), 10);
  assert.is(defaultSpinMs(8, 16), 10);
  assert.is(
    defaultSpinMs(2, 2),
    0,
    "two ranks on two cores: spinning starves ZeroMQ's I/O threads",
  );
  assert.is(defaultSpinMs(1, 1), 0);
  assert.is(localRanksOf({ WEBFPM_DP_LOCAL_SIZE: "2" }), 2);
  assert.is(localRanksOf({ SLURM_NTASKS_PER_NODE: "8" }), 8);
  assert.is(localRanksOf({ OMPI_COMM_WORLD_LOCAL_SIZE: "4" }), 4);
  assert.is(localRanksOf({}), 1);
});

test.run();
