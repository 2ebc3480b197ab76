/**
 * kvwarm's plan and its capacity envelope, with exact block counts: per rung a depth of
 * `min(max computed + 1 + samples, max_model_len - 4)`, shrunk until the chains and the
 * largest point's private shadow tails fit the usable pool; capacity fallbacks where a
 * rung never fits; real-KV points first, fake ones last.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BenchCapacity } from "../../../src/bench/artifact.ts";
import {
  chainLengths,
  planKvwarm,
  pointTailBlocks,
  slotTailBlocks,
} from "../../../src/bench/kvwarm/plan.ts";
import { decodePoint, orderDecode, pointKey } from "../../../src/bench/point.ts";

function capacity(usable: number): BenchCapacity {
  return {
    block_size: 16,
    blocks_total: usable,
    watermark_blocks: 0,
    usable_blocks: usable,
    max_model_len: 256,
    max_num_seqs: 8,
    max_batched_tokens: 256,
    prefix_caching: true,
  };
}

// ctx per slot: B4K400 -> 100 (computed 99), B4K40 -> 10 (9), B2K200 -> 100 (99),
// B1K250 -> 250 (249), B1K254 -> 254 (253: 253 + 2 + 3 steady > 256)
const POINTS = orderDecode([
  decodePoint(1, 254),
  decodePoint(4, 40),
  decodePoint(2, 200),
  decodePoint(4, 400),
  decodePoint(1, 250),
]);
const keys = (ps: readonly { batch_size: number; total_kv_read_tokens: number }[]) =>
  ps.map((p) => pointKey({ kind: "decode", ...p }));

test("a slot's private tail runs from its partial block to computed + 1 + samples tokens", () => {
  assert.is(slotTailBlocks(99, 3, 16), 1, "blocks 6 (tokens 96..111) holds 99..102");
  assert.is(slotTailBlocks(13, 3, 16), 2, "13..16 spans blocks 0 and 1");
  assert.is(slotTailBlocks(16, 3, 16), 1, "at a block boundary: block 0 shared, 16..19 in block 1");
  assert.is(pointTailBlocks(decodePoint(4, 400), 3, 16), 4);
});

test("every rung fits: depths are the deepest need (capped at max_model_len - 4), real-KV first", () => {
  const plan = planKvwarm(POINTS, capacity(32), 3);
  assert.equal(
    plan.rungs.map((r) => [r.batch, r.depth, r.chainBlocks, r.tailBlocks, keys(r.points)]),
    [
      [4, 103, 28, 4, ["decode:B4:K400", "decode:B4:K40"]],
      [2, 103, 14, 2, ["decode:B2:K200"]],
      [1, 252, 16, 1, ["decode:B1:K250"]],
    ],
  );
  assert.equal(keys(plan.order), [
    "decode:B4:K400",
    "decode:B4:K40",
    "decode:B2:K200",
    "decode:B1:K250",
    "decode:B1:K254",
  ]);
  assert.equal([...plan.fallbacks.keys()], ["decode:B1:K254"]);
  assert.match(
    plan.fallbacks.get("decode:B1:K254")!,
    /^steady_span_exceeds_max_model_len: .*258 > 256/,
  );
  assert.is(plan.rungOf(POINTS[0]), plan.rungs[0]);
  assert.is(plan.rungOf(decodePoint(1, 254)), null);
  assert.equal(plan.capacityFallbacks, []);
  // the content the stages will read: chain 0 down to the B1 rung's 252 tokens
  assert.equal(chainLengths(plan.rungs), [252, 103, 103, 103]);
  assert.equal(chainLengths([]), []);
});

test("a rung that does not fit shrinks to a shallower point's depth; deeper points go fake, last", () => {
  // B4 at depth 103: 28 + 4 = 32 > 31; at depth 13 (B4K40's need): 4 x 1 + 4 x 1 = 8
  const plan = planKvwarm(POINTS, capacity(31), 3);
  assert.equal(plan.rungs.map((r) => [r.batch, r.depth, r.chainBlocks + r.tailBlocks]), [
    [4, 13, 8],
    [2, 103, 16],
    [1, 252, 17],
  ]);
  assert.equal(keys(plan.order), [
    "decode:B4:K40",
    "decode:B2:K200",
    "decode:B1:K250",
    "decode:B4:K400",
    "decode:B1:K254",
  ]);
  assert.match(plan.fallbacks.get("decode:B4:K400")!, /^chain_depth_capped: .* 13 tokens/);
});

test("capacity_fallbacks: a rung whose shallowest depth never fits uses fake KV, with its numbers", () => {
  const plan = planKvwarm(POINTS, capacity(7), 3);
  assert.equal(plan.rungs, []);
  assert.equal(plan.capacityFallbacks.map((f) => f.batch), [4, 2, 1]);
  assert.match(
    plan.capacityFallbacks[0].reason,
    /^capacity_fallback: 4 chains of 103 tokens need 28 blocks plus 4 shadow tail blocks; even the shallowest depth 10 does not fit the 7 usable blocks$/,
  );
  assert.equal(keys(plan.order), keys(POINTS), "all fake, in the given order");
  for (const k of ["decode:B4:K400", "decode:B4:K40", "decode:B2:K200", "decode:B1:K250"]) {
    assert.match(plan.fallbacks.get(k)!, /^capacity_fallback: /, k);
  }
});

test("a prompt deeper than max_model_len - 4 cannot be on a chain", () => {
  // L 64, cap 60: ctx 60 -> computed 59 -> prompt 60 <= 60 is on a chain; ctx 61 is not
  const cap = { ...capacity(100), max_model_len: 64 };
  const plan = planKvwarm([decodePoint(1, 60), decodePoint(1, 59)], cap, 1);
  assert.equal(plan.rungs.map((r) => [r.depth, keys(r.points)]), [
    [60, ["decode:B1:K60", "decode:B1:K59"]],
  ]);
  const deep = planKvwarm([decodePoint(1, 61)], cap, 1);
  assert.match(deep.fallbacks.get("decode:B1:K61")!, /^deeper_than_chain_cap: .* 61 tokens/);
});

test.run();
