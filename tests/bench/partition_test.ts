/**
 * How a point's totals are split over its requests: balanced (remainder to the first),
 * prefix reads in whole hash blocks, decode requests admitted at max(1, ctx - 1).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  balancedPartition,
  decodePlan,
  prefixPartition,
  steadyCoordinate,
} from "../../src/bench/partition.ts";

test("balancedPartition gives the remainder to the first requests and sums to the total", () => {
  assert.equal(balancedPartition(10, 4), [3, 3, 2, 2]);
  assert.equal(balancedPartition(8, 4), [2, 2, 2, 2]);
  assert.equal(balancedPartition(3, 3), [1, 1, 1]);
  assert.equal(balancedPartition(0, 2), [0, 0]);
  for (const [t, n] of [[1000, 7], [65536, 24], [5, 5], [129, 128]]) {
    const parts = balancedPartition(t, n);
    assert.is(parts.reduce((s, x) => s + x, 0), t);
    assert.ok(Math.max(...parts) - Math.min(...parts) <= 1);
    assert.equal(parts, [...parts].sort((a, b) => b - a), "larger parts first");
  }
  assert.throws(() => balancedPartition(4, 0), /n must be >= 1/);
});

test("prefixPartition splits whole blocks, at least one per request", () => {
  assert.equal(prefixPartition(5 * 16, 2, 16), [48, 32]);
  assert.equal(prefixPartition(0, 3, 16), [0, 0, 0]);
  assert.equal(prefixPartition(64, 4, 16), [16, 16, 16, 16]);
  assert.throws(() => prefixPartition(40, 2, 16), /not a whole number of 16-token blocks/);
  assert.throws(
    () => prefixPartition(48, 4, 16),
    /3 KV blocks cannot give each of 4 requests one block/,
  );
});

test("decodePlan admits each request at max(1, ctx - 1) and its steady step reads max(2, ctx)", () => {
  // K = 5 over B = 3: ctx [2, 2, 1]
  assert.equal(decodePlan(5, 3), [
    { ctx: 2, computed: 1, promptTokens: 2, steadyKv: 2 },
    { ctx: 2, computed: 1, promptTokens: 2, steadyKv: 2 },
    { ctx: 1, computed: 1, promptTokens: 2, steadyKv: 2 },
  ]);
  assert.equal(decodePlan(100, 1), [{ ctx: 100, computed: 99, promptTokens: 100, steadyKv: 100 }]);
  assert.is(steadyCoordinate(5, 3), 6, "sum(max(1, ctx - 1)) + B = 3 + 3");
  assert.is(steadyCoordinate(65536, 8), 65536);
});

test.run();
