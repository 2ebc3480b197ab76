import { test } from "uvu";
import * as assert from "uvu/assert";
import { FreeBlockQueue } from "../../src/kv/free_block_queue.ts";
import { KvCacheBlock } from "../../src/kv/kv_cache_block.ts";

const ids = (q: FreeBlockQueue) => [...q].map((b) => b.blockId);
const make = (n: number) => Array.from({ length: n }, (_, i) => new KvCacheBlock(i + 1));

test("the queue hands out blocks front first, in the order they were added", () => {
  const q = new FreeBlockQueue(make(4));
  assert.equal(q.popLeft().blockId, 1);
  assert.equal(q.popLeftN(2).map((b) => b.blockId), [2, 3]);
  assert.equal(ids(q), [4]);
  assert.is(q.length, 1);
});

test("remove takes a block out of the middle and keeps the rest in order", () => {
  const blocks = make(5);
  const q = new FreeBlockQueue(blocks);
  q.remove(blocks[2]); // block 3
  assert.equal(ids(q), [1, 2, 4, 5]);
  assert.not.ok(q.has(blocks[2]));
  assert.is(q.length, 4);
  q.remove(blocks[0]);
  q.remove(blocks[4]);
  assert.equal(ids(q), [2, 4]);
});

test("a block appended goes to the back: it is evicted last", () => {
  const blocks = make(3);
  const q = new FreeBlockQueue(blocks);
  const first = q.popLeft();
  q.append(first);
  assert.equal(ids(q), [2, 3, 1]);
});

test("misuse is refused: pop from empty, double append, removing an absent block", () => {
  const blocks = make(2);
  const q = new FreeBlockQueue(blocks);
  assert.throws(() => q.append(blocks[0]), /already in the free queue/);
  assert.throws(() => q.popLeftN(3), /cannot pop 3/);
  q.popLeftN(2);
  assert.throws(() => q.popLeft(), /empty/);
  assert.throws(() => q.remove(blocks[1]), /not in the free queue/);
});

test.run();
