/**
 * The scheduling rule, step by step, on the scheduler itself (no model): the gap of
 * each request closes under the token budget; preemption by recompute; the fence.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { engineConfig } from "../../src/engine/engine_config.ts";
import { generationParams } from "../../src/engine/generation_params.ts";
import { Request } from "../../src/engine/request.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import type { SchedulerOutput } from "../../src/engine/scheduler_output.ts";
import { KvCacheManager } from "../../src/kv/kv_cache_manager.ts";

function setup(numBlocks: number, blockSize: number, budget: number, maxNumSeqs = 8) {
  const kv = new KvCacheManager({ numBlocks, blockSize, watermark: 0 });
  const config = engineConfig({ maxModelLen: 128 }, {
    maxNumBatchedTokens: budget,
    maxNumSeqs,
    watermark: 0,
  });
  return { kv, s: new Scheduler(config, kv, [0]) };
}

let n = 0;
/** A request with its own tokens (no two share a prefix, so no prefix hits). */
const req = (id: string, len: number) =>
  new Request(
    id,
    Int32Array.from({ length: len }, (_, i) => 100 * (n + 1) + i),
    generationParams({ maxTokens: 50, ignoreEos: true }),
    n++,
  );

const shape = (out: SchedulerOutput | null) =>
  out?.scheduled.map((x) => [x.request.requestId, x.numNewTokens]);
const tokens = (out: SchedulerOutput) => new Int32Array(out.sampleRequests.length).fill(9);

test("one rule: each step closes every gap it can under the token budget", () => {
  const { s } = setup(64, 4, 12);
  const [a, b, c] = [req("A", 10), req("B", 7), req("C", 5)];
  [a, b, c].forEach((r) => s.addRequest(r));
  // step 1: A's whole prompt (10), B's first 2; C waits for budget
  const s1 = s.schedule()!;
  assert.equal(shape(s1), [["A", 10], ["B", 2]]);
  assert.equal(
    s1.sampleRequests.map((r) => r.requestId),
    ["A"],
    "a partial prefill does not sample",
  );
  assert.equal([a.numComputedTokens, b.numComputedTokens, a.numOutputPlaceholders], [10, 2, 1]);
  s.update(s1, tokens(s1));
  // step 2: A decodes 1, B finishes its prompt (5), C's whole prompt (5)
  const s2 = s.schedule()!;
  assert.equal(shape(s2), [["A", 1], ["B", 5], ["C", 5]]);
  assert.equal(s2.scheduled.map((x) => x.isDecode), [true, false, false]);
  s.update(s2, tokens(s2));
  assert.equal(shape(s.schedule()), [["A", 1], ["B", 1], ["C", 1]]);
});

test("maxNumSeqs caps running; the rest wait in arrival order", () => {
  const { s } = setup(64, 4, 100, 2);
  ["A", "B", "C"].forEach((id) => s.addRequest(req(id, 3)));
  assert.equal(shape(s.schedule()), [["A", 3], ["B", 3]]);
  assert.equal(s.waiting.map((r) => r.requestId), ["C"]);
});

test("preemption takes the most recently admitted request, back to the front of waiting; nothing is admitted that step", () => {
  // 4 usable blocks of 2 tokens: A and B (4 tokens each) fill the pool.
  const { s, kv } = setup(5, 2, 100);
  const [a, b, c] = [req("A", 4), req("B", 4), req("C", 1)];
  [a, b].forEach((r) => s.addRequest(r));
  const s1 = s.schedule()!;
  s.update(s1, tokens(s1));
  s.addRequest(c);
  // A's position 4 needs a third block: B is preempted, A gets one of its blocks;
  // one block is free again, but C (1 token) is not admitted in a step that preempted.
  const s2 = s.schedule()!;
  assert.equal(shape(s2), [["A", 1]]);
  assert.is(s2.numPreempted, 1);
  assert.equal([b.status, b.numComputedTokens, b.numPreemptions], ["preempted", 0, 1]);
  assert.equal(s.waiting.map((r) => r.requestId), ["B", "C"]);
  assert.is(kv.usage().free, 1);
  assert.equal(kv.blockIds("B"), [[]]);
  s.update(s2, tokens(s2));
  // B recomputes its 5 tokens (prompt + its output): 3 blocks, but only 1 is free
  assert.equal(shape(s.schedule()), [["A", 1]]);
});

test("while an in-flight step fences the victim's blocks, the request waits instead of preempting more", () => {
  const { s, kv } = setup(5, 2, 100);
  const [a, b] = [req("A", 4), req("B", 4)];
  [a, b].forEach((r) => s.addRequest(r));
  const s1 = s.schedule()!; // in flight (async): its output has not arrived
  // A's next token needs a block: B is preempted, but its blocks are fenced by step 1.
  assert.is(s.schedule(), null);
  assert.is(b.status, "preempted");
  assert.is(a.status, "running");
  assert.is(kv.usage().pendingFree, 2);
  s.update(s1, tokens(s1)); // step 1 completes: B's blocks come back, both tokens arrive
  assert.is(kv.usage().pendingFree, 0);
  assert.equal(b.outputTokenIds, [9], "a preempted request keeps the token it had in flight");
  const s3 = s.schedule()!;
  assert.equal(shape(s3), [["A", 1]]);
  assert.equal(s3.scheduled[0].prevSampleRow, -1, "A's input arrived: no reference needed");
});

test("async: a decode scheduled before its input arrives refers to the previous step's row", () => {
  const { s } = setup(64, 4, 100);
  const [a, b] = [req("A", 3), req("B", 5)];
  [a, b].forEach((r) => s.addRequest(r));
  const s1 = s.schedule()!;
  const s2 = s.schedule()!; // step 1 still in flight
  assert.equal(shape(s2), [["A", 1], ["B", 1]]);
  assert.equal(s2.scheduled.map((x) => x.prevSampleRow), [0, 1]);
  assert.equal([a.numOutputPlaceholders, a.numTokens, a.tokenIds.length], [2, 5, 3]);
  assert.is(s.schedule(), null, "a third step cannot start before step 1's tokens arrive");
  s.update(s1, Int32Array.of(11, 12));
  assert.equal([a.tokenIds.at(-1), b.tokenIds.at(-1)], [11, 12]);
  assert.equal(shape(s.schedule()), [["A", 1], ["B", 1]]);
});

test("a request whose last allowed token is in flight is not scheduled again", () => {
  const { s } = setup(64, 4, 100);
  const a = new Request("A", Int32Array.of(1, 2), generationParams({ maxTokens: 1 }), 0);
  s.addRequest(a);
  const s1 = s.schedule()!;
  assert.is(s.schedule(), null);
  s.update(s1, Int32Array.of(5));
  assert.equal([a.status, a.finishReason], ["finished", "length"]);
});

test.run();
