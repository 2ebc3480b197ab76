import { test } from "uvu";
import * as assert from "uvu/assert";
import { Engine } from "../../src/engine/engine.ts";
import type { EngineConfig } from "../../src/engine/engine_config.ts";
import type { GenerationParams } from "../../src/engine/generation_params.ts";
import type { RequestOutput } from "../../src/engine/request.ts";
import type { StepObservation } from "../../src/engine/step_observation.ts";
import { Rng } from "../../src/util/rng.ts";
import {
  CpuTestModel,
  type CpuTestModelOptions,
  nextToken,
  referenceGenerate,
} from "./cpu_test_model.ts";

function setup(model: Partial<CpuTestModelOptions>, config: Partial<EngineConfig> = {}) {
  const m = new CpuTestModel({ numBlocks: 64, blockSize: 4, ...model });
  return { model: m, engine: new Engine(m, { watermark: 0, ...config }) };
}

interface Job {
  prompt: number[];
  params: Partial<GenerationParams>;
}

/** A seeded mix: prompt lengths 1..40, max tokens 1..24, some ignore EOS, some sampled. */
function jobs(seed: string, n: number, vocab = 50): Job[] {
  const rng = Rng.fromSeed(seed);
  return Array.from({ length: n }, () => ({
    prompt: Array.from({ length: rng.int(1, 41) }, () => rng.int(1, vocab)),
    params: {
      maxTokens: rng.int(1, 25),
      ignoreEos: rng.int(0, 3) === 0,
      temperature: rng.int(0, 2) === 0 ? 0 : 0.8,
      seed: rng.int(0, 1000),
    },
  }));
}

async function serve(engine: Engine, work: Job[]): Promise<number[][]> {
  const reqs = work.map((j) => engine.addRequest(j.prompt, j.params));
  await engine.runUntilDone();
  for (const r of reqs) assert.is(r.status, "finished");
  return reqs.map((r) => r.outputTokenIds);
}

const expected = (model: CpuTestModel, work: Job[]) =>
  work.map((j) => referenceGenerate(j.prompt, { maxTokens: 16, ...j.params }, model));

test("continuous batching gives every request the tokens of one-at-a-time generation", async () => {
  const work = jobs("batching", 14);
  const { model, engine } = setup({}, { maxNumBatchedTokens: 24, maxNumSeqs: 5 });
  const outputs = await serve(engine, work);
  assert.equal(outputs, expected(model, work));
  assert.ok(model.batches.some((b) => b.seqs.length >= 4), "steps did batch requests");

  const one = setup({}, { maxNumSeqs: 1 });
  assert.equal(await serve(one.engine, work), outputs, "the engine one request at a time agrees");
  assert.ok(one.model.batches.every((b) => b.seqs.length === 1));
});

test("every request ends by EOS (stop) or by max_tokens (length)", async () => {
  const work = jobs("finish", 20);
  const { model, engine } = setup({});
  const reqs = work.map((j) => engine.addRequest(j.prompt, j.params));
  await engine.runUntilDone();
  for (const r of reqs) {
    const out = r.outputTokenIds;
    const eos = !r.params.ignoreEos && model.eosTokenIds.includes(out[out.length - 1]);
    assert.is(r.finishReason, eos ? "stop" : "length");
    if (!eos) assert.is(out.length, r.params.maxTokens);
  }
  assert.ok(reqs.some((r) => r.finishReason === "stop"), "the mix exercises EOS");
});

test("chunked prefill: a long prompt is split by the budget, and decodes share its steps", async () => {
  // A (50-token prompt) and B (3 tokens) arrive together; budget 16 per step.
  const { model, engine } = setup({}, { maxNumBatchedTokens: 16 });
  const a = engine.addRequest(Array.from({ length: 50 }, (_, i) => 1 + (i % 40)), {
    maxTokens: 4,
    ignoreEos: true,
  });
  const b = engine.addRequest([7, 8, 9], { maxTokens: 8, ignoreEos: true });
  await engine.runUntilDone();
  const perStep = model.batches.map((batch) => batch.seqs.map((s) => s.queryLen));
  // step 1: A 16 (budget spent). 2: A 16. 3: A 16. 4: A 2 + B 3 (both sample).
  // then both decode: A three more tokens, B seven more.
  assert.equal(perStep.slice(0, 4), [[16], [16], [16], [2, 3]]);
  assert.equal(perStep.slice(4), [[1, 1], [1, 1], [1, 1], [1], [1], [1], [1]]);
  assert.equal(model.batches[3].sampleTokenIndices.length, 2);
  assert.equal(model.batches[0].sampleTokenIndices.length, 0, "a partial prefill samples nothing");
  assert.equal(a.outputTokenIds, referenceGenerate(Array.from(a.promptTokenIds), a.params, model));
  assert.equal(b.outputTokenIds, referenceGenerate([7, 8, 9], b.params, model));
});

test("without chunked prefill a prompt waits for a step whose budget holds it whole", async () => {
  const { model, engine } = setup({ maxModelLen: 32 }, {
    maxNumBatchedTokens: 32,
    enableChunkedPrefill: false,
  });
  engine.addRequest([1, 2, 3], { maxTokens: 3, ignoreEos: true });
  engine.addRequest(Array.from({ length: 30 }, (_, i) => i + 1), { maxTokens: 1 });
  await engine.runUntilDone();
  // step 1: the 3-token prompt + 29 left in the budget < 30: the long prompt waits
  assert.equal(model.batches[0].seqs.map((s) => s.queryLen), [3]);
  assert.equal(model.batches[1].seqs.map((s) => s.queryLen), [1, 30]);
});

test("preemption by recompute gives identical tokens, and the pool drains", async () => {
  // 8 usable blocks of 4 tokens; four requests growing to 26 tokens (7 blocks) each.
  const { model, engine } = setup({ numBlocks: 9 }, { maxNumSeqs: 4 });
  const work: Job[] = [0, 1, 2, 3].map((k) => ({
    prompt: [k + 1, k + 2, k + 3, k + 4, k + 5, k + 6],
    params: { maxTokens: 20, ignoreEos: true },
  }));
  const reqs = work.map((j) => engine.addRequest(j.prompt, j.params));
  const preempted: number[] = [];
  engine.onStep((o) => preempted.push(o.numPreempted));
  await engine.runUntilDone();
  assert.equal(reqs.map((r) => r.outputTokenIds), expected(model, work));
  assert.ok(reqs.some((r) => r.numPreemptions > 0), "the pool forced preemptions");
  assert.ok(preempted.some((n) => n > 0));
  const u = engine.kvUsage();
  assert.is(u.free, u.total, "every block is back");
  assert.is(u.numRequests, 0);
});

test("pool exhaustion: requests wait (or are preempted) and nothing crashes", async () => {
  const work = jobs("exhaustion", 30);
  const { model, engine } = setup({ numBlocks: 16 }, { maxNumSeqs: 16, maxNumBatchedTokens: 64 });
  let maxWaitingWhileRunning = 0;
  engine.onStep(() => {
    const s = engine.scheduler;
    if (s.running.length > 0) {
      maxWaitingWhileRunning = Math.max(maxWaitingWhileRunning, s.waiting.length);
    }
  });
  assert.equal(await serve(engine, work), expected(model, work));
  assert.ok(maxWaitingWhileRunning > 0, "some requests had to wait for blocks");
  assert.is(engine.kvUsage().inUse, 0);
});

test("async scheduling gives the same tokens as sync, with the next step issued before outputs arrive", async () => {
  const work = jobs("async", 16);
  const cfg = { maxNumBatchedTokens: 20, maxNumSeqs: 6 };
  const sync = setup({ numBlocks: 24 }, cfg);
  const asyn = setup({ numBlocks: 24 }, { ...cfg, asyncScheduling: true });
  const syncOut = await serve(sync.engine, work);
  const asyncOut = await serve(asyn.engine, work);
  assert.equal(asyncOut, syncOut);
  assert.equal(syncOut, expected(sync.model, work));
  assert.is(sync.model.maxInFlight, 1);
  assert.is(asyn.model.maxInFlight, 2, "async mode kept a step in flight while scheduling");
  assert.ok(
    asyn.model.batches.some((b) => b.prevSampleRef.some((r) => r >= 0)),
    "decode inputs referred to the previous step's samples",
  );
  assert.ok(sync.model.batches.every((b) => b.prevSampleRef.every((r) => r < 0)));
  assert.is(asyn.engine.kvUsage().free, asyn.engine.kvUsage().total);
});

test("step's oneSubmit marks only the step it issues with nothing in flight", async () => {
  const { model, engine } = setup({}, { asyncScheduling: true, maxNumSeqs: 4 });
  for (let i = 0; i < 3; i++) engine.addRequest([1 + i, 2, 3], { maxTokens: 4, ignoreEos: true });
  await engine.step({ oneSubmit: true }); // issues the prefill (pipeline empty) and the next
  assert.is(model.batches.length, 2);
  assert.is(model.batches[0].oneSubmit, true);
  assert.is(model.batches[1].oneSubmit, undefined, "the step issued behind it is left alone");
  await engine.step({ oneSubmit: true }); // a step is in flight: the one it issues is not marked
  assert.is(model.batches[2].oneSubmit, undefined);
  await engine.runUntilDone();
  assert.ok(model.batches.slice(1).every((b) => b.oneSubmit === undefined));
});

test("withNext prepares the step and the next before launching either; the tokens are the same", async () => {
  const work = jobs("with-next", 6);
  const cfg = { asyncScheduling: true, maxNumBatchedTokens: 20, maxNumSeqs: 6 };
  const plain = setup({ numBlocks: 24 }, cfg);
  const ahead = setup({ numBlocks: 24 }, cfg);
  const plainOut = await serve(plain.engine, work);
  const reqs = work.map((j) => ahead.engine.addRequest(j.prompt, j.params));
  const first = await ahead.engine.step({ oneSubmit: true, withNext: true });
  assert.equal(ahead.model.preparedLog, ["prepare 0", "prepare 1", "launch 0", "launch 1"]);
  assert.is(first!.numScheduledTokens, ahead.model.batches[0].tokenIds.length, "the first step");
  assert.is(ahead.model.batches[0].oneSubmit, true);
  assert.is(ahead.model.batches[1].oneSubmit, undefined);
  await ahead.engine.step({ withNext: true }); // a step in flight: issues one, as without
  assert.is(ahead.model.preparedLog.length, 4, "nothing prepared behind a step in flight");
  assert.is(ahead.model.batches.length, 3);
  await ahead.engine.runUntilDone();
  assert.equal(reqs.map((r) => r.outputTokenIds), plainOut);
  assert.equal(plain.model.preparedLog, [], "without withNext the engine only forwards");
  const sync = setup({}, { maxNumSeqs: 4 });
  sync.engine.addRequest([1, 2, 3], { maxTokens: 3, ignoreEos: true });
  await sync.engine.step({ withNext: true });
  assert.equal(sync.model.preparedLog, [], "sync mode ignores withNext");
});

test("a step token budget above the config's schedules bigger steps until it is unset", async () => {
  const { model, engine } = setup({}, { maxNumBatchedTokens: 16 });
  engine.addRequest(Array.from({ length: 40 }, (_, i) => 1 + (i % 40)), { maxTokens: 1 });
  engine.setStepTokenBudget(64);
  assert.is(engine.stepTokenBudget, 64);
  await engine.step();
  assert.is(model.batches[0].tokenIds.length, 40, "the whole prompt in one step");
  engine.setStepTokenBudget(null);
  assert.is(engine.stepTokenBudget, 16);
  engine.addRequest(Array.from({ length: 40 }, (_, i) => 2 + (i % 40)), { maxTokens: 1 });
  await engine.runUntilDone();
  assert.ok(model.batches.slice(1).every((b) => b.tokenIds.length <= 16), "chunked by 16 again");
  assert.throws(() => engine.setStepTokenBudget(0), /step token budget 0 must be an integer/);
  assert.throws(() => engine.setStepTokenBudget(2.5), /must be an integer in 1\.\.Infinity/);
});

test("async: a request that hit EOS finishes when its token arrives; its extra step's token is discarded", async () => {
  // find a prompt whose first generated token is EOS (token 0)
  const rng = Rng.fromSeed("eos-first");
  let prompt: number[] = [];
  const probe = new CpuTestModel({ numBlocks: 8, blockSize: 4 });
  do {
    prompt = Array.from({ length: 5 }, () => rng.int(1, 50));
  } while (referenceGenerate(prompt, { maxTokens: 1 }, probe)[0] !== 0);

  const { model, engine } = setup({}, { asyncScheduling: true });
  const events: RequestOutput[] = [];
  const r = engine.addRequest(prompt, { maxTokens: 10 }, { onOutput: (e) => events.push(e) });
  await engine.runUntilDone();
  assert.equal(r.outputTokenIds, [0]);
  assert.is(r.finishReason, "stop");
  // step 1 prefilled and sampled EOS; step 2 (issued before EOS arrived) decoded it anyway
  assert.is(model.batches.length, 2);
  assert.equal(Array.from(model.batches[1].prevSampleRef), [0]);
  assert.equal(events.map((e) => [e.tokenId, e.finished]), [[0, true]]);
  assert.is(engine.kvUsage().free, engine.kvUsage().total, "its blocks came back after step 2");
});

test("the streaming callback sees each token as it arrives, then exactly one finish", async () => {
  const { model, engine } = setup({});
  const seen: RequestOutput[] = [];
  const r = engine.addRequest([3, 4, 5], { maxTokens: 6, ignoreEos: true }, {
    onOutput: (e) => seen.push(e),
  });
  let stepsSeen = 0;
  engine.onStep(() => {
    stepsSeen++;
    assert.is(seen.length, stepsSeen, "one token delivered per step, before the observer");
  });
  await engine.runUntilDone();
  assert.equal(seen.map((e) => e.tokenId), r.outputTokenIds);
  assert.equal(seen.map((e) => e.finished), [false, false, false, false, false, true]);
  assert.equal(r.outputTokenIds, referenceGenerate([3, 4, 5], r.params, model));
});

test("max_model_len caps a request's tokens (finish by length)", async () => {
  const { model, engine } = setup({ maxModelLen: 12 });
  const r = engine.addRequest([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], { maxTokens: 50, ignoreEos: true });
  await engine.runUntilDone();
  assert.is(r.tokenIds.length, 12);
  assert.is(r.finishReason, "length");
  assert.equal(r.outputTokenIds, referenceGenerate(Array.from(r.promptTokenIds), r.params, model));
});

test("bad input is rejected with a clear error naming it", () => {
  const { engine } = setup({ maxModelLen: 16, numBlocks: 4 });
  assert.throws(
    () => engine.addRequest(Array(17).fill(1)),
    /17 tokens, longer than max_model_len 16/,
  );
  assert.throws(() => engine.addRequest(Array(16).fill(1)), /no room to generate/);
  assert.throws(() => engine.addRequest([]), /prompt is empty/);
  assert.throws(() => engine.addRequest([1, 50]), /token 50 at position 1 is outside \[0, 50\)/);
  assert.throws(() => engine.addRequest([1, 2.5]), /token 2.5 at position 1/);
  assert.throws(
    () => engine.addRequest([1], { maxTokens: 0 }),
    /maxTokens must be an integer >= 1/,
  );
  assert.throws(
    () => engine.addRequest(Array(13).fill(1)),
    /need 4 KV blocks of 4; the pool has 3/,
  );
  engine.addRequest([1], {}, { requestId: "x" });
  assert.throws(() => engine.addRequest([1], {}, { requestId: "x" }), /"x" is already in use/);
  assert.throws(() => engine.abort("nope"), /no unfinished request "nope"/);
});

test("a request that cannot fit beside what stays resident ends with kv_capacity", async () => {
  // 4 usable blocks of 4 tokens: the request outgrows the pool at 17 tokens.
  const { model, engine } = setup({ numBlocks: 5 });
  const r = engine.addRequest([1, 2, 3, 4, 5, 6, 7, 8], { maxTokens: 40, ignoreEos: true });
  await engine.runUntilDone();
  assert.is(r.finishReason, "kv_capacity");
  assert.is(r.numPreemptions, 1);
  assert.is(r.tokenIds.length, 17, "it generated while it fit");
  const ref = referenceGenerate([1, 2, 3, 4, 5, 6, 7, 8], { maxTokens: 9, ignoreEos: true }, model);
  assert.equal(r.outputTokenIds, ref);
  assert.is(engine.kvUsage().free, 4);
});

test("abort ends a running or waiting request and frees its blocks", async () => {
  const { engine } = setup({}, { maxNumSeqs: 1 });
  const a = engine.addRequest([1, 2, 3], { maxTokens: 20, ignoreEos: true });
  const b = engine.addRequest([4, 5, 6], { maxTokens: 20, ignoreEos: true });
  await engine.step();
  await engine.step();
  assert.is(a.status, "running");
  assert.is(b.status, "waiting");
  engine.abort(b.requestId);
  engine.abort(a.requestId);
  assert.equal([a.finishReason, b.finishReason], ["abort", "abort"]);
  assert.not.ok(engine.hasUnfinishedRequests());
  assert.is(engine.kvUsage().inUse, 0);
  assert.is(await engine.step(), null, "nothing left to do");
});

test("prefix caching: a request sharing a cached prefix (and salt) computes only the rest", async () => {
  const { model, engine } = setup({});
  const prefix = Array.from({ length: 20 }, (_, i) => i + 1);
  const first = engine.addRequest(prefix, { maxTokens: 2, cacheSalt: "s" });
  await engine.runUntilDone();
  const obs: StepObservation[] = [];
  engine.onStep((o) => obs.push(o));
  const same = engine.addRequest([...prefix, 30, 31], { maxTokens: 3, cacheSalt: "s" });
  const other = engine.addRequest([...prefix, 30, 31], { maxTokens: 3, cacheSalt: "t" });
  await engine.runUntilDone();
  assert.is(first.numCachedTokens, 0);
  assert.is(same.numCachedTokens, 20, "five full blocks hit");
  assert.is(other.numCachedTokens, 0, "another salt misses");
  assert.equal(obs[0].sumPrefillTokens, 2 + 22);
  assert.equal(obs[0].sumPrefillKvTokens, 20);
  for (const r of [same, other]) {
    assert.equal(
      r.outputTokenIds,
      referenceGenerate(Array.from(r.promptTokenIds), r.params, model),
    );
  }
});

test("async: a request to park that stops on EOS while its next step is in flight parks once that step lands", async () => {
  const prompt = [5, 6, 7];
  const eos = nextToken(prompt, { temperature: 0, seed: 0 }, 50); // the first sampled token
  const model = new CpuTestModel({ numBlocks: 32, blockSize: 4, eosTokenIds: [eos] });
  const engine = new Engine(model, { watermark: 0, asyncScheduling: true });
  const r = engine.addRequest(prompt, { maxTokens: 10 }, { parkOnFinish: true });
  await engine.step(); // samples EOS; r's next decode was scheduled before it arrived
  assert.ok(r.stopped);
  await engine.step(); // that step's token is discarded and r drains
  assert.equal([r.status, r.numOutputPlaceholders, r.outputTokenIds], ["parked", 0, [eos]]);
  assert.not.ok(engine.hasUnfinishedRequests());
  // and runUntilDone ends rather than reporting no progress
  const again = new Engine(new CpuTestModel({ numBlocks: 32, blockSize: 4, eosTokenIds: [eos] }), {
    watermark: 0,
    asyncScheduling: true,
  });
  const q = again.addRequest(prompt, { maxTokens: 10 }, { parkOnFinish: true });
  await again.runUntilDone();
  assert.is(q.status, "parked");
});

test("without chunked prefill a step token budget below maxModelLen is refused, as in the config", () => {
  const model = new CpuTestModel({ numBlocks: 32, blockSize: 4, maxModelLen: 64 });
  const engine = new Engine(model, { watermark: 0, enableChunkedPrefill: false });
  assert.throws(
    () => engine.setStepTokenBudget(8),
    /without chunked prefill the step token budget \(8\) must be >= maxModelLen \(64\)/,
  );
  engine.setStepTokenBudget(64);
  assert.is(engine.stepTokenBudget, 64);
});

test.run();
