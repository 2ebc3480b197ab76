import { test } from "uvu";
import * as assert from "uvu/assert";
import { KvCacheManager } from "../../src/kv/kv_cache_manager.ts";
import { FULL_ATTENTION_GROUP } from "../../src/kv/kv_cache_group.ts";
import { iota, KvTestRequest } from "./kv_test_request.ts";

const ids = (blocks: readonly { blockId: number }[]) => blocks.map((b) => b.blockId);
const refs = (kv: KvCacheManager, blockIds: number[]) =>
  blockIds.map((id) => kv.pool.blocks[id].refCnt);

/** Allocate `n` new tokens (after `hit`) and mark them computed, as the scheduler does. */
function admit(kv: KvCacheManager, req: KvTestRequest, n = req.tokenIds.length) {
  const hit = kv.getComputedBlocks(req);
  const out = kv.allocateSlots(req, n - hit.numComputedTokens, 0, hit);
  if (out) req.numComputedTokens = n;
  return { hit, out };
}

test("a new request gets the lowest free ids; its full known blocks are cached", () => {
  // pool of 8 (blocks 1..7), blockSize 4; request A has 10 tokens:
  // positions  0..3 | 4..7 | 8..9
  // blocks        1 |    2 |    3      blocks 1, 2 full -> cached
  const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4, watermark: 0 });
  const a = new KvTestRequest("A", iota(10));
  const { out } = admit(kv, a);
  assert.equal(out!.map(ids), [[1, 2, 3]]);
  assert.equal(kv.blockIds("A"), [[1, 2, 3]]);
  assert.equal(Array.from(kv.blockTable("A", 5)), [1, 2]);
  assert.is(a.blockHashes.length, 2);
  assert.is(kv.pool.blocks[1].blockHash, a.blockHashes[0]);
  assert.is(kv.pool.blocks[2].blockHash, a.blockHashes[1]);
  assert.is(kv.pool.blocks[3].blockHash, null);
  assert.equal(kv.usage(), {
    total: 7,
    free: 4,
    inUse: 3,
    cached: 2,
    cachedFree: 0,
    pendingFree: 0,
    pendingCopies: 0,
    watermarkBlocks: 0,
    numRequests: 1,
  });
});

test("allocation is all or nothing: null when short, and nothing is taken", () => {
  const kv = new KvCacheManager({ numBlocks: 4, blockSize: 4, watermark: 0 }); // 3 usable
  const a = new KvTestRequest("A", iota(8));
  admit(kv, a); // blocks 1, 2
  const b = new KvTestRequest("B", iota(8, 100));
  assert.is(kv.allocateSlots(b, 8), null);
  assert.not.ok(kv.holds("B"));
  assert.equal(kv.pool.freeBlockIds(), [3]);
  assert.is(kv.allocateSlots(a, 5), null, "A growing to 13 tokens needs 2 more");
  assert.equal(kv.blockIds("A"), [[1, 2]]);
  assert.equal(kv.allocateSlots(a, 4)!.map(ids), [[3]]);
});

test("the watermark holds blocks back from new requests only", () => {
  // 10 usable blocks, watermark 0.2 -> 2 blocks a new request must leave free
  const kv = new KvCacheManager({ numBlocks: 11, blockSize: 1, watermark: 0.2 });
  assert.is(kv.watermarkBlocks, 2);
  const a = new KvTestRequest("A", iota(9));
  assert.is(kv.allocateSlots(a, 9), null, "9 of 10 would leave 1 < 2 free");
  assert.ok(kv.allocateSlots(a, 8));
  a.numComputedTokens = 8;
  assert.ok(kv.allocateSlots(a, 2), "a running request may use the last blocks");
  assert.is(kv.usage().free, 0);
});

test("a prefix hit reuses cached full blocks and never covers the whole prompt", () => {
  // pool 1..7, blockSize 4. A = [1..8] takes blocks 1 2 (both cached), then is freed:
  // free queue 3 4 5 6 7 2 1.
  const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4, watermark: 0 });
  const a = new KvTestRequest("A", iota(8));
  admit(kv, a);
  kv.free("A");
  assert.equal(kv.pool.freeBlockIds(), [3, 4, 5, 6, 7, 2, 1]);

  // B = the same 8 tokens: at most 7 may be hits, so one block (1); block 3 is new.
  //   B: [1 | 3]   block 3 holds B's second block; its hash is already cached by block 2
  const b = new KvTestRequest("B", iota(8));
  const { hit, out } = admit(kv, b);
  assert.is(hit.numComputedTokens, 4);
  assert.equal(hit.blocks.map(ids), [[1]]);
  assert.equal(out!.map(ids), [[3]]);
  assert.equal(kv.blockIds("B"), [[1, 3]]);
  assert.is(kv.pool.blocks[3].blockHash, null, "a duplicate hash is not registered twice");

  // C = the same 8 tokens + 1: both blocks hit (block 2 leaves the free queue).
  const c = new KvTestRequest("C", iota(9));
  const r = admit(kv, c);
  assert.is(r.hit.numComputedTokens, 8);
  assert.equal(kv.blockIds("C"), [[1, 2, 4]]);
  assert.equal(refs(kv, [1, 2, 3, 4]), [2, 1, 1, 1]);
  assert.equal(kv.pool.freeBlockIds(), [5, 6, 7]);
});

test("cache_salt isolates requests: the same tokens under another salt miss", () => {
  const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4, watermark: 0 });
  admit(kv, new KvTestRequest("A", iota(9), "salt-a"));
  assert.is(kv.getComputedBlocks(new KvTestRequest("B", iota(9), "salt-b")).numComputedTokens, 0);
  assert.is(kv.getComputedBlocks(new KvTestRequest("C", iota(9), null)).numComputedTokens, 0);
  assert.is(kv.getComputedBlocks(new KvTestRequest("D", iota(9), "salt-a")).numComputedTokens, 8);
});

test("a hit at refcount 0 counts against the pool: touching takes it off the free queue", () => {
  // 3 usable blocks. A = 8 tokens in blocks 1 2, freed (cached at refcount 0).
  const kv = new KvCacheManager({ numBlocks: 4, blockSize: 4, watermark: 0 });
  admit(kv, new KvTestRequest("A", iota(8)));
  kv.free("A");
  // B = 12 tokens extending A: hit 2 blocks (both free) + 1 new = 3 blocks from 3 free.
  const b = new KvTestRequest("B", iota(12));
  const { hit } = admit(kv, b);
  assert.is(hit.numComputedTokens, 8);
  assert.equal(kv.blockIds("B"), [[1, 2, 3]]);
  assert.is(kv.usage().free, 0);
});

test("free returns tail blocks first: a request's tail is evicted before its prefix", () => {
  const kv = new KvCacheManager({ numBlocks: 6, blockSize: 2, watermark: 0 });
  admit(kv, new KvTestRequest("A", iota(6))); // blocks 1 2 3
  kv.free("A");
  // free queue: 4 5 | 3 2 1  (never used first, then A's tail ... prefix)
  assert.equal(kv.pool.freeBlockIds(), [4, 5, 3, 2, 1]);
  assert.not.ok(kv.holds("A"));
  kv.free("A"); // freeing twice is a no-op
  assert.equal(kv.usage().free, 5);
});

test("blocks freed under an in-flight step come back only when that step completes", () => {
  const kv = new KvCacheManager({ numBlocks: 6, blockSize: 2, watermark: 0 });
  admit(kv, new KvTestRequest("A", iota(4))); // blocks 1 2
  admit(kv, new KvTestRequest("B", iota(2, 50))); // block 3
  const { stepId } = kv.beginStep(["A"]);
  kv.free("A");
  kv.free("B"); // not read by the step: back at once
  assert.equal(kv.pool.freeBlockIds(), [4, 5, 3]);
  assert.equal(refs(kv, [1, 2]), [1, 1]);
  assert.is(kv.usage().pendingFree, 2);
  assert.not.ok(kv.resetPrefixCache(), "the fence is honoured before a prefix-cache reset");
  kv.completeStep(stepId);
  assert.equal(kv.pool.freeBlockIds(), [4, 5, 3, 2, 1]);
  assert.is(kv.usage().pendingFree, 0);
  assert.ok(kv.resetPrefixCache());
  assert.is(kv.usage().cached, 0);
});

test("a write into a shared tail is refused; forkTail gives a private copy that rides the next step", () => {
  // A: 6 tokens in blocks 1 | 2 (positions 4,5 in block 2). Another holder shares block 2.
  const kv = new KvCacheManager({ numBlocks: 6, blockSize: 4, watermark: 0 });
  const a = new KvTestRequest("A", iota(7));
  admit(kv, a, 6);
  kv.pool.touch([kv.pool.blocks[2]]);
  assert.throws(() => kv.allocateSlots(a, 1), /would write into block 2, which has 2 holders/);

  // fork: block 3 replaces block 2 in A's table; A keeps its reference on 2 until the copy ran
  //   A: [1 | 3]     copy 2 -> 3 rides the next step
  assert.equal(kv.forkTail(a), [[2, 3]]);
  assert.equal(kv.blockIds("A"), [[1, 3]]);
  assert.equal(refs(kv, [2, 3]), [2, 1]);
  assert.is(kv.usage().pendingCopies, 1);
  const { stepId, blockCopies } = kv.beginStep(["A"]);
  assert.equal(blockCopies, [[2, 3]]);
  assert.equal(kv.beginStep([]).blockCopies, [], "a copy rides exactly one step");
  kv.completeStep(stepId);
  assert.equal(refs(kv, [2]), [1]);
  assert.ok(kv.allocateSlots(a, 1));
  assert.equal(kv.forkTail(a), [], "nothing shared: nothing to fork");
});

test("forking a shared block with no computed tokens of the request needs no copy", () => {
  const kv = new KvCacheManager({ numBlocks: 6, blockSize: 4, watermark: 0 });
  const a = new KvTestRequest("A", iota(9));
  assert.ok(kv.allocateSlots(a, 9)); // blocks 1 2 3
  a.numComputedTokens = 8; // (say the step computing position 8 has not run): block 3 holds nothing yet
  kv.pool.touch([kv.pool.blocks[3]]);
  assert.equal(kv.forkTail(a), []);
  assert.equal(kv.blockIds("A"), [[1, 2, 4]]);
  assert.equal(refs(kv, [3]), [1]);
});

test("injectComputed allocates ctx+1 tokens and registers the full blocks at once", () => {
  // ctx = 9, blockSize 4: blocks for 10 tokens = 3; full computed blocks = 2 (cached now)
  const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4, watermark: 0 });
  const a = new KvTestRequest("A", iota(10), "fake-1");
  assert.ok(kv.injectComputed(a, 9));
  assert.equal(kv.blockIds("A"), [[1, 2, 3]]);
  assert.is(kv.usage().cached, 2);
  a.numComputedTokens = 9;
  assert.equal(kv.allocateSlots(a, 1)!.map(ids), [[]], "the admission step allocates nothing");
  // a later request with the same salt and prefix hits the injected blocks exactly
  kv.free("A");
  const b = new KvTestRequest("B", iota(12), "fake-1");
  assert.is(kv.getComputedBlocks(b).numComputedTokens, 8);
  assert.not.ok(new KvCacheManager({ numBlocks: 3, blockSize: 4, watermark: 0 }).injectComputed(
    new KvTestRequest("C", iota(10)),
    9,
  ));
  assert.throws(() => kv.injectComputed(new KvTestRequest("D", iota(3)), 3), /needs at least 4/);
});

/** A parked chain of 14 computed tokens in blocks 1 2 3 4 (blockSize 4; 1..3 cached). */
function chainOf14(groups = 1, numBlocks = 12) {
  const kv = new KvCacheManager({
    numBlocks,
    blockSize: 4,
    watermark: 0,
    groups: Array(groups).fill(FULL_ATTENTION_GROUP),
  });
  const chain = new KvTestRequest("chain", iota(15), "__kvwarm_0_0");
  assert.ok(kv.allocateSlots(chain, 14));
  chain.numComputedTokens = 14;
  return { kv, chain };
}

test("a shadow shares the chain's full blocks and forks only its tail", () => {
  // chain:  [1 2 3 4]          positions 0..13 computed
  // shadow at ctx 10, holding 13 tokens (ctx + 1 + 2 headroom) = 4 blocks:
  //   shared [1 2] (positions 0..7), tail [5 6]; block 3 (positions 8..9 computed) -> 5
  const { kv, chain } = chainOf14();
  const shadow = new KvTestRequest("shadow", chain.tokenIds.slice(0, 11), "shadow-salt");
  assert.ok(kv.registerShadow(shadow, chain, 10, 13, true));
  assert.equal(kv.blockIds("shadow"), [[1, 2, 5, 6]]);
  assert.equal(refs(kv, [1, 2, 3, 4, 5, 6]), [2, 2, 2, 1, 1, 1]);
  const { stepId, blockCopies } = kv.beginStep(["shadow"]);
  assert.equal(blockCopies, [[3, 5]]);
  kv.completeStep(stepId);
  assert.equal(refs(kv, [3]), [1], "the copy's hold on the chain block ends with its step");

  // steady steps allocate nothing; shadow blocks are never registered in the cache
  shadow.numComputedTokens = 10;
  const cachedBefore = kv.usage().cached;
  assert.equal(kv.allocateSlots(shadow, 1)!.map(ids), [[]]);
  shadow.tokenIds.push(77, 78);
  shadow.numComputedTokens = 11;
  assert.equal(kv.allocateSlots(shadow, 2)!.map(ids), [[]]);
  assert.is(kv.usage().cached, cachedBefore);

  // cleanup drops the shared references and frees only the tail (tail first)
  kv.free("shadow");
  assert.equal(refs(kv, [1, 2, 3, 4]), [1, 1, 1, 1]);
  assert.equal(kv.pool.freeBlockIds(), [7, 8, 9, 10, 11, 6, 5]);
});

test("a shadow without copy-on-write gets a fresh tail and no copy", () => {
  const { kv, chain } = chainOf14();
  const shadow = new KvTestRequest("shadow", chain.tokenIds.slice(0, 11), "s");
  assert.ok(kv.registerShadow(shadow, chain, 10, 11, false));
  assert.equal(kv.blockIds("shadow"), [[1, 2, 5]]);
  assert.equal(refs(kv, [3]), [1]);
  assert.equal(kv.beginStep(["shadow"]).blockCopies, []);
});

test("a shadow at a block boundary shares every computed block and needs no copy", () => {
  const { kv, chain } = chainOf14();
  const shadow = new KvTestRequest("shadow", chain.tokenIds.slice(0, 9), "s");
  assert.ok(kv.registerShadow(shadow, chain, 8, 9, true));
  assert.equal(kv.blockIds("shadow"), [[1, 2, 5]]);
  assert.equal(kv.beginStep([]).blockCopies, []);
});

test("a shadow freed before its copy ran drops the copy and its hold", () => {
  const { kv, chain } = chainOf14();
  const shadow = new KvTestRequest("shadow", chain.tokenIds.slice(0, 11), "s");
  kv.registerShadow(shadow, chain, 10, 12, true);
  kv.free("shadow");
  assert.equal(refs(kv, [1, 2, 3, 4]), [1, 1, 1, 1]);
  assert.is(kv.usage().pendingCopies, 0);
  assert.equal(kv.beginStep([]).blockCopies, []);
});

test("shadow registration is all or nothing across KV groups", () => {
  // two groups share 11 usable blocks; the chain holds 4 per group (1..4 and 5..8): 3 free.
  const { kv, chain } = chainOf14(2);
  assert.equal(kv.blockIds("chain"), [[1, 2, 3, 4], [5, 6, 7, 8]]);
  const shadow = new KvTestRequest("shadow", chain.tokenIds.slice(0, 11), "s");
  // a tail of 2 blocks per group needs 4 > 3 free: refused, nothing touched
  assert.not.ok(kv.registerShadow(shadow, chain, 10, 13, true));
  assert.not.ok(kv.holds("shadow"));
  assert.equal(refs(kv, [1, 2, 3, 5, 6, 7]), [1, 1, 1, 1, 1, 1]);
  assert.equal(kv.pool.freeBlockIds(), [9, 10, 11]);
  // a tail of 1 block per group fits: each group shares its own chain blocks
  assert.ok(kv.registerShadow(shadow, chain, 10, 11, true));
  assert.equal(kv.blockIds("shadow"), [[1, 2, 9], [5, 6, 10]]);
  assert.equal(kv.beginStep(["shadow"]).blockCopies, [[3, 9], [7, 10]]);
});

test("shadow registration names a chain that is too short or not computed far enough", () => {
  const { kv, chain } = chainOf14();
  const s = new KvTestRequest("s", chain.tokenIds.slice(0, 11), "s");
  assert.throws(() => kv.registerShadow(s, chain, 15, 16, true), /has 14 computed tokens/);
  assert.throws(() => kv.registerShadow(s, chain, 10, 10, true), /must hold more/);
  const ghost = new KvTestRequest("ghost", iota(20));
  ghost.numComputedTokens = 20;
  assert.throws(() => kv.registerShadow(s, ghost, 10, 11, true), /holds too few blocks/);
});

test("two KV groups: each takes its own blocks, and a hit is the prefix both have", () => {
  const kv = new KvCacheManager({
    numBlocks: 12,
    blockSize: 2,
    watermark: 0,
    groups: [FULL_ATTENTION_GROUP, FULL_ATTENTION_GROUP],
  });
  const a = new KvTestRequest("A", iota(5));
  admit(kv, a);
  assert.equal(kv.blockIds("A"), [[1, 2, 3], [4, 5, 6]]);
  kv.free("A");
  const b = new KvTestRequest("B", iota(6));
  const { hit } = admit(kv, b);
  assert.is(hit.numComputedTokens, 4);
  assert.equal(hit.blocks.map(ids), [[1, 2], [4, 5]]);
});

test("bad configuration and misuse are named", () => {
  assert.throws(() => new KvCacheManager({ numBlocks: 8, watermark: 1 }), /watermark/);
  assert.throws(() => new KvCacheManager({ numBlocks: 8, groups: [] }), /at least one group/);
  const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
  const a = new KvTestRequest("A", iota(4));
  assert.throws(() => kv.allocateSlots(a, 0), /positive integer/);
  assert.throws(() => kv.forkTail(a), /holds no blocks/);
  assert.throws(() => kv.blockTable("A", 1), /holds no blocks/);
});

test.run();
