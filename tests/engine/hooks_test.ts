/**
 * The engine's benchmark hooks: fake-KV injection, chains that park, shadows that
 * borrow a parked chain's KV, shedding through the finish path behind the fence, and
 * the per-step observation.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { Engine } from "../../src/engine/engine.ts";
import type { EngineConfig } from "../../src/engine/engine_config.ts";
import type { StepObservation } from "../../src/engine/step_observation.ts";
import { CpuTestModel, type CpuTestModelOptions, referenceGenerate } from "./cpu_test_model.ts";

function setup(model: Partial<CpuTestModelOptions> = {}, config: Partial<EngineConfig> = {}) {
  const m = new CpuTestModel({ numBlocks: 32, blockSize: 4, ...model });
  const engine = new Engine(m, { watermark: 0, ...config });
  const obs: StepObservation[] = [];
  engine.onStep((o) => obs.push(o));
  return { model: m, engine, obs };
}

const iota = (n: number, from = 1) => Array.from({ length: n }, (_, i) => from + ((i * 7) % 45));

test("injectRunning: blocks for ctx+1 tokens, ctx computed, full blocks registered now, straight into running", async () => {
  // ctx 9, blockSize 4: blocks [1 2 3] for positions 0..9; blocks 1, 2 hashed at injection
  const { model, engine, obs } = setup({ strictKv: false });
  const r = engine.injectRunning(iota(10), 9, { maxTokens: 3, ignoreEos: true, cacheSalt: "f1" })!;
  assert.is(r.status, "running");
  assert.is(r.numComputedTokens, 9);
  assert.equal(engine.blockIds(r.requestId), [[1, 2, 3]]);
  assert.is(engine.kvUsage().cached, 2, "registered in the untimed window, not in a step");
  await engine.runUntilDone();
  // admission step: position 9 alone, reading 9 KV tokens; then steady decodes
  assert.equal(model.batches[0].seqs.map((s) => [s.queryLen, s.contextLen]), [[1, 10]]);
  assert.equal(Array.from(model.batches[0].positions), [9]);
  assert.equal(
    obs.map((
      o,
    ) => [o.numPrefillRequests, o.sumPrefillKvTokens, o.numDecodeRequests, o.sumDecodeKvTokens]),
    [[1, 9, 0, 0], [0, 0, 1, 10], [0, 0, 1, 11]],
  );
  assert.is(r.outputTokenIds.length, 3);
});

test("injectRunning returns null and takes nothing when the pool is short", () => {
  const { engine } = setup({ numBlocks: 4, strictKv: false }); // 3 usable blocks
  const before = engine.kvUsage();
  assert.is(engine.injectRunning(iota(13), 12), null, "13 tokens need 4 blocks");
  assert.equal(engine.kvUsage(), before);
  assert.not.ok(engine.hasUnfinishedRequests());
  assert.throws(() => engine.injectRunning(iota(5), 5), /needs a prompt of at least 6 tokens/);
});

test("fake prefix: injected blocks shed at once stay cached, and the measuring request hits them exactly", async () => {
  const { engine, obs } = setup({ strictKv: false });
  const prefix = iota(16);
  const seed = engine.injectRunning([...prefix, 3], 16, { cacheSalt: "p" })!;
  engine.shed(seed.requestId);
  assert.is(seed.finishReason, "shed");
  const u = engine.kvUsage();
  assert.equal([u.inUse, u.cached, u.cachedFree], [0, 4, 4], "4 full blocks cached at refcount 0");
  const r = engine.addRequest([...prefix, ...iota(8, 2)], { maxTokens: 1, cacheSalt: "p" });
  await engine.runUntilDone();
  assert.is(r.numCachedTokens, 16);
  assert.equal([obs[0].sumPrefillTokens, obs[0].sumPrefillKvTokens], [8, 16]);
});

/** A chain built by the real scheduler (chunked prefill), parked when it finishes. */
async function parkedChain(engine: Engine, length = 30, salt = "__kvwarm_0_0") {
  const chain = engine.addRequest(iota(length), {
    maxTokens: 1,
    ignoreEos: true,
    cacheSalt: salt,
  }, { requestId: salt, parkOnFinish: true });
  await engine.runUntilDone();
  return chain;
}

test("a chain parks when it finishes: out of running, blocks resident, nothing in flight", async () => {
  const { engine } = setup({}, { maxNumBatchedTokens: 8, asyncScheduling: true });
  const chain = await parkedChain(engine);
  assert.is(chain.status, "parked");
  assert.is(chain.finishReason, "length");
  assert.is(chain.numOutputPlaceholders, 0);
  assert.is(engine.numInFlightSteps, 0);
  assert.equal(engine.blockIds(chain.requestId), [[1, 2, 3, 4, 5, 6, 7, 8]]);
  assert.is(engine.scheduler.parked.get(chain.requestId), chain);
  assert.not.ok(engine.scheduler.running.includes(chain));
  assert.not.ok(engine.hasUnfinishedRequests(), "parked requests are not pending work");
});

test("a shadow shares the chain's full blocks, forks its tail by copy-on-write, and reads the chain's KV", async () => {
  const { model, engine, obs } = setup();
  const chain = await parkedChain(engine); // 30 tokens in blocks 1..8
  obs.length = 0;
  const freeBefore = engine.kvUsage().free;
  // shadow at ctx 21: shares blocks 1..5 (positions 0..19); block 6 (positions 20..23,
  // 20 computed) is copied into its first tail block; the tail covers 22 + 3 headroom = 25
  //   shadow table: [1 2 3 4 5 | 9 10]     copy 6 -> 9 rides the admission step
  const shadow = engine.registerShadow(chain.requestId, 21, { maxTokens: 4, cacheSalt: "m-1" }, {
    headroomTokens: 3,
  })!;
  assert.equal(engine.blockIds(shadow.requestId), [[1, 2, 3, 4, 5, 9, 10]]);
  assert.equal(shadow.tokenIds, chain.tokenIds.slice(0, 22));
  assert.ok(shadow.params.ignoreEos);
  assert.is(engine.kvUsage().free, freeBefore - 2);
  for (let i = 0; i < 3; i++) {
    await engine.step();
    assert.is(engine.kvUsage().free, freeBefore - 2, "admission and steady steps allocate nothing");
  }
  // its KV at positions 0..20 is the chain's, token for token
  const slot = (table: number[], p: number) => table[p >> 2] * 4 + (p & 3);
  const [chainTable] = engine.blockIds(chain.requestId);
  const [shadowTable] = engine.blockIds(shadow.requestId);
  for (let p = 0; p <= 20; p++) {
    assert.is(model.kvTokens[slot(shadowTable, p)], model.kvTokens[slot(chainTable, p)]);
  }
  await engine.runUntilDone();

  assert.equal(model.batches.at(-4)!.blockCopies, [[6, 9]]);
  assert.equal(obs.map((o) => o.numBlockCopies), [1, 0, 0, 0]);
  assert.equal(
    obs.map((o) => [o.numDecodeRequests, o.sumDecodeKvTokens, o.sumPrefillKvTokens]),
    [[0, 0, 21], [1, 22, 0], [1, 23, 0], [1, 24, 0]],
  );
  assert.equal(
    shadow.outputTokenIds,
    referenceGenerate(chain.tokenIds.slice(0, 22), { maxTokens: 4, ignoreEos: true }, model),
  );
  assert.is(shadow.status, "finished");
  // cleanup dropped the shared references and freed only the tail
  assert.equal(chain.status, "parked");
  assert.ok([1, 2, 3, 4, 5, 6, 7, 8].every((b) => engine.kv.pool.blocks[b].refCnt === 1));
  assert.is(engine.kvUsage().free, freeBefore);
});

test("a shadow without copy-on-write gets a fresh tail: no copy, and its partial block is not the chain's", async () => {
  const { model, engine } = setup({ strictKv: false });
  const chain = await parkedChain(engine);
  const shadow = engine.registerShadow(chain.requestId, 21, { maxTokens: 2 }, { cow: false })!;
  assert.equal(engine.blockIds(shadow.requestId), [[1, 2, 3, 4, 5, 9]]);
  await engine.runUntilDone();
  assert.equal(model.batches.at(-2)!.blockCopies, []);
  assert.is(model.kvTokens[9 * 4], -1, "position 20 of the shadow was never written");
});

test("shadow registration is all or nothing: a tail that does not fit takes nothing", async () => {
  const { engine } = setup({ numBlocks: 12 }); // 11 usable; the chain holds 8
  const chain = await parkedChain(engine);
  const before = engine.kvUsage();
  assert.is(engine.registerShadow(chain.requestId, 21, {}, { headroomTokens: 12 }), null);
  assert.equal(engine.kvUsage(), before);
  assert.ok([1, 2, 3, 4, 5, 6].every((b) => engine.kv.pool.blocks[b].refCnt === 1));
  assert.ok(engine.registerShadow(chain.requestId, 21, {}, { headroomTokens: 2 }));
  assert.throws(() => engine.registerShadow("none", 5), /chain none is not parked/);
  assert.throws(
    () => engine.registerShadow(chain.requestId, 31),
    /has 31 tokens; a shadow at 31 needs 32/,
  );
});

test("generational extension: a longer chain with the same salt recomputes only the extension", async () => {
  const { engine, obs } = setup();
  const rung0 = await parkedChain(engine, 30, "__kvwarm_0_0");
  engine.shed(rung0.requestId);
  obs.length = 0;
  const longer = iota(50);
  assert.equal(longer.slice(0, 30), Array.from(rung0.promptTokenIds));
  const rung1 = engine.addRequest(longer, {
    maxTokens: 1,
    ignoreEos: true,
    cacheSalt: "__kvwarm_0_0",
  }, {
    parkOnFinish: true,
  });
  await engine.runUntilDone();
  assert.is(rung1.numCachedTokens, 28, "7 full blocks of rung 0 reused");
  assert.is(obs.reduce((s, o) => s + o.sumPrefillTokens, 0), 22);
  assert.is(rung1.status, "parked");
});

test("park with a token in flight: the request stops being scheduled and parks when it arrives", async () => {
  const { model, engine } = setup({}, { asyncScheduling: true });
  const r = engine.addRequest([5, 6, 7], { maxTokens: 20, ignoreEos: true });
  await engine.step(); // step 1 applied, step 2 (r decoding) in flight
  assert.is(engine.numInFlightSteps, 1);
  assert.not.ok(engine.park(r.requestId), "tokens in flight: the park is pending");
  assert.ok(r.parkPending);
  const batchesBefore = model.batches.length;
  await engine.step();
  assert.is(r.status, "parked");
  assert.is(r.numOutputPlaceholders, 0);
  assert.is(model.batches.length, batchesBefore, "nothing was scheduled for it meanwhile");
  assert.is(r.outputTokenIds.length, 2);
  assert.ok(engine.blockIds(r.requestId)[0].length > 0, "its blocks stay resident");
  assert.ok(engine.park(r.requestId), "parking a parked request is a no-op");
  assert.throws(
    () => engine.park(engine.addRequest([1]).requestId),
    /waiting; only a running one parks/,
  );
});

test("shed goes through the finish path: blocks an in-flight step reads wait for it, its late token is discarded", async () => {
  const { engine } = setup({}, { asyncScheduling: true });
  const r = engine.addRequest([5, 6, 7], { maxTokens: 20, ignoreEos: true });
  await engine.step();
  const tokens = r.outputTokenIds;
  engine.shed(r.requestId);
  assert.is(r.status, "finished");
  assert.is(r.finishReason, "shed");
  assert.is(engine.kvUsage().pendingFree, 1, "its block is fenced by the step in flight");
  assert.not.ok(engine.resetPrefixCache(), "no prefix-cache reset past the fence");
  await engine.drain();
  assert.equal(engine.kvUsage().pendingFree, 0);
  assert.is(engine.kvUsage().free, engine.kvUsage().total);
  assert.equal(r.outputTokenIds, tokens, "the in-flight token was discarded");
  assert.ok(engine.resetPrefixCache());
});

test("a shed request still waiting is never admitted", async () => {
  const { engine, obs } = setup({}, { maxNumSeqs: 1 });
  const a = engine.addRequest([1, 2, 3], { maxTokens: 3, ignoreEos: true });
  const b = engine.addRequest([4, 5, 6, 7], { maxTokens: 3, ignoreEos: true });
  await engine.step();
  engine.shed(b.requestId);
  await engine.runUntilDone();
  assert.is(a.finishReason, "length");
  assert.equal([b.finishReason, b.numComputedTokens], ["shed", 0]);
  assert.is(obs.reduce((s, o) => s + o.sumPrefillTokens, 0), 3);
});

test("every step is observed: scheduled sums, end-of-schedule and arrival times, GPU time", async () => {
  const { model, engine, obs } = setup({}, { maxNumBatchedTokens: 10 });
  engine.addRequest(iota(14), { maxTokens: 3, ignoreEos: true });
  engine.addRequest(iota(3), { maxTokens: 4, ignoreEos: true });
  const mine: StepObservation[] = [];
  const stop = engine.onStep((o) => mine.push(o));
  await engine.step();
  stop();
  await engine.runUntilDone();
  assert.is(mine.length, 1, "unsubscribed observers hear nothing more");
  assert.is(obs.length, model.batches.length);
  obs.forEach((o, i) => {
    const b = model.batches[i];
    assert.is(o.stepId, i + 1);
    assert.is(o.numScheduledTokens, b.tokenIds.length);
    assert.is(o.numRequests, b.seqs.length);
    assert.is(o.numPrefillRequests + o.numDecodeRequests, o.numRequests);
    assert.ok(o.scheduleEndMs <= o.outputArrivalMs);
    assert.is(o.gpuMs, b.tokenIds.length / 1000);
  });
  // step 1: 10 tokens of the 14-token prompt; step 2: its last 4 + the 3-token prompt
  assert.equal([obs[0].sumPrefillTokens, obs[0].sumPrefillKvTokens], [10, 0]);
  assert.equal([obs[1].numPrefillRequests, obs[1].sumPrefillTokens, obs[1].sumPrefillKvTokens], [
    2,
    7,
    10,
  ]);
  assert.equal([obs[2].numDecodeRequests, obs[2].sumDecodeKvTokens], [2, 14 + 3]);
});

test.run();
