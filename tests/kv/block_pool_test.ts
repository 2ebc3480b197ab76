import { test } from "uvu";
import * as assert from "uvu/assert";
import { BlockPool } from "../../src/kv/block_pool.ts";
import { hashBlockTokens } from "../../src/kv/block_hash.ts";

const ids = (blocks: { blockId: number }[]) => blocks.map((b) => b.blockId);

test("block 0 is the null block: never handed out; the other blocks are usable", () => {
  const pool = new BlockPool(5, 4, true);
  assert.ok(pool.nullBlock.isNull);
  assert.is(pool.nullBlock.blockId, 0);
  assert.equal(pool.usage(), { total: 4, free: 4, inUse: 0, cached: 0, cachedFree: 0 });
  assert.equal(ids(pool.getNewBlocks(4)), [1, 2, 3, 4]);
  assert.throws(() => pool.getNewBlocks(1), /cannot get 1 free blocks: only 0/);
  assert.throws(() => pool.freeBlocks([pool.nullBlock]), /null block/);
  assert.throws(() => pool.touch([pool.nullBlock]), /null block/);
});

test("freed blocks queue behind never-used ones, in the order given (tail first)", () => {
  // pool of 6: blocks 1..5. A request takes [1 2 3] and frees them tail first.
  // free queue after: 4 5 3 2 1   (front -> back)
  const pool = new BlockPool(6, 4, true);
  const req = pool.getNewBlocks(3);
  pool.freeBlocks([...req].reverse());
  assert.equal(pool.freeBlockIds(), [4, 5, 3, 2, 1]);
  // the next allocation of 3 takes 4, 5, then the request's tail block 3
  assert.equal(ids(pool.getNewBlocks(3)), [4, 5, 3]);
});

test("a cached block stays reusable at refcount 0 until it is evicted", () => {
  // pool of 4 (blocks 1..3), blockSize 2. Request A caches block 1 = [7 8], frees it.
  const pool = new BlockPool(4, 2, true);
  const tokens = [7, 8];
  const h = hashBlockTokens(null, tokens, 0, 2, []);
  const [a] = pool.getNewBlocks(1);
  assert.ok(pool.cacheFullBlock(0, a, h, null, tokens, 0));
  pool.freeBlocks([a]);
  assert.equal(pool.usage(), { total: 3, free: 3, inUse: 0, cached: 1, cachedFree: 1 });
  assert.equal(pool.freeBlockIds(), [2, 3, 1]);

  // A hit touches block 1: it leaves the free queue from the back, O(1).
  const hit = pool.getCachedBlock(0, h, tokens, 0, null)!;
  assert.is(hit.blockId, 1);
  pool.touch([hit]);
  assert.is(hit.refCnt, 1);
  assert.equal(pool.freeBlockIds(), [2, 3]);
  assert.equal(pool.usage(), { total: 3, free: 2, inUse: 1, cached: 1, cachedFree: 0 });

  // Freed again, then three allocations: blocks 2 and 3 go first, block 1 is evicted last.
  pool.freeBlocks([hit]);
  assert.equal(ids(pool.getNewBlocks(2)), [2, 3]);
  assert.is(pool.getCachedBlock(0, h, tokens, 0, null)?.blockId, 1);
  assert.equal(ids(pool.getNewBlocks(1)), [1]);
  assert.is(pool.getCachedBlock(0, h, tokens, 0, null), null);
  assert.is(a.blockHash, null);
  assert.equal(pool.usage().cached, 0);
});

test("a hit re-checks the tokens and the parent: a forged hash entry misses", () => {
  const pool = new BlockPool(3, 2, true);
  const [b] = pool.getNewBlocks(1);
  const h = hashBlockTokens(null, [1, 2], 0, 2, []);
  pool.cacheFullBlock(0, b, h, null, [1, 2], 0);
  assert.is(pool.getCachedBlock(0, h, [1, 2], 0, null), b);
  assert.is(pool.getCachedBlock(0, h, [1, 3], 0, null), null, "same hash, other tokens");
  assert.is(pool.getCachedBlock(0, h, [1, 2], 0, h), null, "same hash, other parent");
  assert.is(pool.getCachedBlock(1, h, [1, 2], 0, null), null, "other KV group");
  assert.equal(Array.from(pool.cachedTokens(b.blockId)), [1, 2]);
});

test("a hash cached twice keeps its first block; the duplicate stays uncached", () => {
  const pool = new BlockPool(4, 2, true);
  const [x, y] = pool.getNewBlocks(2);
  const h = hashBlockTokens(null, [4, 4], 0, 2, []);
  assert.ok(pool.cacheFullBlock(0, x, h, null, [4, 4], 0));
  assert.not.ok(pool.cacheFullBlock(0, y, h, null, [4, 4], 0));
  assert.is(y.blockHash, null);
  assert.is(pool.getCachedBlock(0, h, [4, 4], 0, null), x);
});

test("with prefix caching off nothing is registered", () => {
  const pool = new BlockPool(3, 2, false);
  const [b] = pool.getNewBlocks(1);
  assert.not.ok(
    pool.cacheFullBlock(0, b, hashBlockTokens(null, [1, 2], 0, 2, []), null, [1, 2], 0),
  );
  assert.is(pool.usage().cached, 0);
});

test("refcounts never go negative: freeing a free block is refused", () => {
  const pool = new BlockPool(3, 2, true);
  const [b] = pool.getNewBlocks(1);
  pool.touch([b]);
  pool.freeBlocks([b, b]);
  assert.throws(() => pool.freeBlocks([b]), /freed at refcount 0/);
  assert.is(b.refCnt, 0);
});

test("reset of the prefix cache is refused while a block is held", () => {
  const pool = new BlockPool(3, 2, true);
  const [b] = pool.getNewBlocks(1);
  pool.cacheFullBlock(0, b, hashBlockTokens(null, [1, 2], 0, 2, []), null, [1, 2], 0);
  assert.not.ok(pool.resetPrefixCache());
  pool.freeBlocks([b]);
  assert.ok(pool.resetPrefixCache());
  assert.equal(pool.usage(), { total: 2, free: 2, inUse: 0, cached: 0, cachedFree: 0 });
  assert.equal([...pool.cachedEntries()], []);
});

test("bad pool shapes are named", () => {
  assert.throws(() => new BlockPool(1, 16, true), /numBlocks must be an integer >= 2/);
  assert.throws(() => new BlockPool(8, 12, true), /blockSize must be a power of two, got 12/);
});

test.run();
