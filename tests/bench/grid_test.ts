/**
 * The generated grid: axes of powers of two plus the limit, the design's
 * endpoint-keeping down-sampling, decode KV ladders normalised to the steady coordinate
 * and deduplicated, prefill KV-read axes in whole hash blocks, infeasible candidates
 * dropped, execution order.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BenchCapacity } from "../../src/bench/artifact.ts";
import { downsample, powerAxis } from "../../src/bench/downsample.ts";
import { isFeasible } from "../../src/bench/feasibility.ts";
import {
  FULL_GRID,
  generateDecodeGrid,
  generatePrefillGrid,
  SMOKE_GRID,
} from "../../src/bench/grid.ts";
import { steadyCoordinate } from "../../src/bench/partition.ts";
import { DEFAULT_MEDIAN_POLICY } from "../../src/bench/timed_samples.ts";

const capacity = (over: Partial<BenchCapacity> = {}): BenchCapacity => ({
  block_size: 16,
  blocks_total: 4096,
  watermark_blocks: 40,
  usable_blocks: 4056,
  max_model_len: 1024,
  max_num_seqs: 24,
  max_batched_tokens: 512,
  prefix_caching: true,
  ...over,
});

test("powerAxis: powers of two below the limit, then the limit", () => {
  assert.equal(powerAxis(48), [1, 2, 4, 8, 16, 32, 48]);
  assert.equal(powerAxis(64), [1, 2, 4, 8, 16, 32, 64]);
  assert.equal(powerAxis(1), [1]);
  assert.equal(powerAxis(20, 4), [4, 8, 16, 20]);
});

test("downsample keeps both endpoints and follows values[(s*(n-1) + (k-1)//2) // (k-1)]", () => {
  const v = [1, 2, 4, 8, 16, 32, 64, 128, 256, 300];
  assert.equal(downsample(v, 2), [1, 300]);
  // n = 10, k = 4: indices (0+1)//3=0, (9+1)//3=3, (18+1)//3=6, (27+1)//3=9
  assert.equal(downsample(v, 4), [1, 8, 64, 300]);
  // k = 3: (0+1)//2=0, (9+1)//2=5, (18+1)//2=9
  assert.equal(downsample(v, 3), [1, 32, 300]);
  assert.equal(downsample(v, 10), v);
  assert.equal(downsample(v, 50), v);
  assert.equal(downsample(v, 1), [300]);
  for (let k = 2; k <= 10; k++) {
    const d = downsample(v, k);
    assert.is(d.length, k);
    assert.is(d[0], 1);
    assert.is(d[d.length - 1], 300);
  }
});

test("decode ladders are normalised to the steady coordinate and deduplicated", () => {
  // B = 4: K = 4 (ctx 1 each) is measured at 2 per request = 8, the same as K = 8.
  assert.is(steadyCoordinate(4, 4), 8);
  assert.is(steadyCoordinate(8, 4), 8);
  assert.is(steadyCoordinate(5, 4), 8);
  assert.is(steadyCoordinate(9, 4), 9);
  const { points } = generateDecodeGrid(capacity(), FULL_GRID, DEFAULT_MEDIAN_POLICY);
  const b4 = points.filter((p) => p.batch_size === 4).map((p) => p.total_kv_read_tokens);
  // ladder {B=4, 8, 16, ..., 2048, max 4 x 1022}: 4 is measured at 8, merging with 8
  assert.equal(b4, [4088, 2048, 1024, 512, 256, 128, 64, 32, 16, 8]);
  for (const p of points) {
    assert.is(steadyCoordinate(p.total_kv_read_tokens, p.batch_size), p.total_kv_read_tokens);
  }
});

test("decode grid: batch axis to min(seqs, tokens, pool), max KV per batch feasible, order batch desc then KV desc", () => {
  const cap = capacity();
  const { points } = generateDecodeGrid(cap, FULL_GRID, DEFAULT_MEDIAN_POLICY);
  const batches = [...new Set(points.map((p) => p.batch_size))];
  assert.equal(batches, [24, 16, 8, 4, 2, 1]);
  for (let i = 1; i < points.length; i++) {
    const a = points[i - 1], b = points[i];
    assert.ok(
      a.batch_size > b.batch_size ||
        (a.batch_size === b.batch_size && a.total_kv_read_tokens > b.total_kv_read_tokens),
      `order at ${i}`,
    );
  }
  for (const b of batches) {
    const ks = points.filter((p) => p.batch_size === b).map((p) => p.total_kv_read_tokens);
    const kmax = ks[0];
    assert.ok(isFeasible({ kind: "decode", batch_size: b, total_kv_read_tokens: kmax }, cap, 1));
    assert.not.ok(
      isFeasible({ kind: "decode", batch_size: b, total_kv_read_tokens: kmax + 1 }, cap, 1),
      `B=${b}: ${kmax} is the largest feasible KV`,
    );
  }
  // B = 1: max(ctx, 2) + 2 <= max_model_len (the admission step's token, one steady step)
  assert.is(points.filter((p) => p.batch_size === 1)[0].total_kv_read_tokens, 1022);
});

test("decode grid: a small pool bounds the batch axis and the ladders", () => {
  const cap = capacity({ blocks_total: 70, watermark_blocks: 0, usable_blocks: 70 });
  const { points } = generateDecodeGrid(cap, FULL_GRID, DEFAULT_MEDIAN_POLICY);
  assert.is(Math.max(...points.map((p) => p.batch_size)), 24);
  const b24 = points.filter((p) => p.batch_size === 24);
  // 24 requests share 70 blocks of 16: the largest KV is bounded by the pool, not the length
  assert.ok(b24[0].total_kv_read_tokens < 24 * 64, String(b24[0].total_kv_read_tokens));
  for (const p of points) assert.ok(isFeasible(p, cap, 1));
});

test("decode grid: sample limits down-sample both axes keeping endpoints", () => {
  const { points } = generateDecodeGrid(capacity(), SMOKE_GRID, DEFAULT_MEDIAN_POLICY);
  assert.equal(points.map((p) => [p.batch_size, p.total_kv_read_tokens]), [
    [24, 24 * 1022],
    [24, 48],
    [1, 1022],
    [1, 2],
  ]);
});

test("prefill grid: token axis, 3 smallest legal batches, KV-read axis in whole blocks, largest first", () => {
  const cap = capacity({ max_batched_tokens: 64, max_model_len: 256 });
  const { points } = generatePrefillGrid(cap, FULL_GRID, DEFAULT_MEDIAN_POLICY);
  const tokens = [...new Set(points.map((p) => p.total_prefill_tokens))];
  assert.equal(tokens, [64, 32, 16, 8, 4, 2, 1]);
  assert.equal(
    [...new Set(points.filter((p) => p.total_prefill_tokens === 2).map((p) => p.batch_size))],
    [2, 1],
    "B <= T",
  );
  assert.equal(
    [...new Set(points.filter((p) => p.total_prefill_tokens === 64).map((p) => p.batch_size))],
    [4, 2, 1],
  );
  for (const p of points) assert.is(p.total_kv_read_tokens % 16, 0);
  const b4t64 = points.filter((p) => p.batch_size === 4 && p.total_prefill_tokens === 64)
    .map((p) => p.total_kv_read_tokens / 16);
  // {0, B=4, 8, 16, 32, max}: a request of 16 new tokens holds at most 14 prefix blocks
  // (16 + 14 x 16 + 2 <= 256), so the max is 4 x 14 = 56 blocks
  assert.equal(b4t64, [56, 32, 16, 8, 4, 0]);
  for (let i = 1; i < points.length; i++) {
    const a = points[i - 1], b = points[i];
    assert.ok(
      a.total_prefill_tokens > b.total_prefill_tokens ||
        (a.total_prefill_tokens === b.total_prefill_tokens && a.batch_size > b.batch_size) ||
        (a.total_prefill_tokens === b.total_prefill_tokens && a.batch_size === b.batch_size &&
          a.total_kv_read_tokens > b.total_kv_read_tokens),
      `largest first at ${i}`,
    );
  }
});

test("prefill grid without prefix caching has no KV-read points", () => {
  const { points } = generatePrefillGrid(
    capacity({ prefix_caching: false, max_batched_tokens: 16 }),
    FULL_GRID,
    DEFAULT_MEDIAN_POLICY,
  );
  assert.ok(points.length > 0);
  assert.ok(points.every((p) => p.total_kv_read_tokens === 0));
});

test("infeasible candidates are dropped and counted", () => {
  // 3 usable blocks of 16: the batch axis stops at 3 requests (one block each); a prompt
  // of 64 tokens needs 4 blocks, so every prefill point with T >= 64 is dropped
  const cap = capacity({ blocks_total: 3, watermark_blocks: 0, usable_blocks: 3, max_num_seqs: 4 });
  const d = generateDecodeGrid(cap, FULL_GRID, DEFAULT_MEDIAN_POLICY);
  assert.equal([...new Set(d.points.map((p) => p.batch_size))], [3, 2, 1]);
  assert.is(d.points[0].total_kv_read_tokens, 45, "3 requests x (15 KV + 1 steady) = 3 blocks");
  const p = generatePrefillGrid(cap, FULL_GRID, DEFAULT_MEDIAN_POLICY);
  assert.is(p.infeasible, 16, "T = 64..512 at B = 1, 2, 4");
  assert.ok(p.points.every((q) => isFeasible(q, cap, 1)));
  assert.is(Math.max(...p.points.map((q) => q.total_prefill_tokens)), 32);
});

test.run();
