/**
 * The point estimate: one sample as it is, or the upper median sorted(walls)[n // 2],
 * naming the sample it chose; and the progress line's ETA.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { estimateWall } from "../../src/bench/estimate.ts";
import { formatDuration, Progress } from "../../src/bench/progress.ts";
import { BoundaryGc } from "../../src/bench/gc_policy.ts";

test("one sample is its own estimate", () => {
  assert.equal(estimateWall([0.5]), { method: "single_sample", median_of: 1, index: 0, wall: 0.5 });
});

test("the upper median of 3 is the middle sample, named by its index", () => {
  assert.equal(estimateWall([0.012, 0.010, 0.011]), {
    method: "upper_median",
    median_of: 3,
    index: 2,
    wall: 0.011,
  });
  // even count: sorted [1, 2, 3, 4][2] = 3 (the upper of the two middles)
  assert.equal(estimateWall([4, 1, 3, 2]).wall, 3);
  assert.equal(estimateWall([4, 1, 3, 2]).index, 2);
  assert.throws(() => estimateWall([]), /no samples/);
});

test("progress: done/total, current point, regime counts and an ETA per kind", () => {
  let now = 0;
  const p = new Progress(4, { decode: 2, prefill: 2 }, () => now);
  assert.match(p.line(), /ETA \?$/);
  p.start(1, "decode:B2:K64");
  now = 10_000;
  p.finish("decode", "legacy");
  assert.is(p.line(), "[1/4] #1 decode:B2:K64 | legacy=1 | ETA 0:30");
  p.start(2, "decode:B1:K8");
  now = 30_000;
  p.finish("decode", "skip");
  p.start(3, "prefill:B1:T8:K0");
  now = 32_000;
  p.finish("prefill", "not_applicable");
  // decode done; one prefill left at 2 s a prefill
  assert.is(p.line(), "[3/4] #3 prefill:B1:T8:K0 | legacy=1 skip=1 not_applicable=1 | ETA 0:02");
  assert.is(formatDuration(3725), "1:02:05");
});

test("GC runs only when called at a boundary, and records its policy", () => {
  let calls = 0;
  const gc = new BoundaryGc(() => calls++);
  gc.collect();
  gc.collect();
  const r = gc.record();
  assert.equal([r.policy, r.exposed, r.collections, calls], ["point_boundary", true, 2, 2]);
  const none = new BoundaryGc(null);
  none.collect();
  assert.equal([none.exposed, none.record().collections], [false, 0]);
});

test.run();
