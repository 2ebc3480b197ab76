/**
 * Seeded random workloads through the whole engine: random pools (so preemption and
 * waiting happen), budgets, sequence caps, sync or async scheduling, prefix caching on
 * or off, requests arriving mid-run, aborts and sheds at random steps, fake-KV
 * injections (under their own salts). Every request that ran to its end must equal one-at-a-time generation,
 * every cut-short one a prefix of it, and the pool must drain.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { Engine } from "../../src/engine/engine.ts";
import type { Request } from "../../src/engine/request.ts";
import { Rng } from "../../src/util/rng.ts";
import { CpuTestModel, referenceGenerate } from "./cpu_test_model.ts";

async function runWorkload(seed: number) {
  const rng = Rng.fromSeed(`engine-property:${seed}`);
  const blockSize = [1, 2, 4, 8][rng.int(0, 4)];
  const maxModelLen = rng.int(24, 64);
  const model = new CpuTestModel({
    numBlocks: rng.int(4, 40),
    blockSize,
    vocabSize: rng.int(8, 60),
    maxModelLen,
    eosTokenIds: [0],
    strictKv: false, // injected requests read fake KV; everyone else is checked by output
  });
  const asyncScheduling = rng.int(0, 2) === 1;
  const engine = new Engine(model, {
    maxNumBatchedTokens: rng.int(4, 40),
    maxNumSeqs: rng.int(1, 7),
    enablePrefixCaching: rng.int(0, 4) > 0,
    asyncScheduling,
    watermark: rng.int(0, 2) * 0.05,
  });
  const shared = Array.from({ length: 20 }, () => rng.int(1, model.vocabSize));
  const requests: Request[] = [];
  const cut = new Set<Request>();
  const injected = new Set<Request>();
  const add = () => {
    const len = rng.int(1, Math.min(24, maxModelLen - 1));
    const prompt = rng.int(0, 2)
      ? shared.slice(0, len)
      : Array.from({ length: len }, () => rng.int(1, model.vocabSize));
    const params = {
      maxTokens: rng.int(1, 30),
      ignoreEos: rng.int(0, 3) === 0,
      temperature: rng.int(0, 2) * 0.7,
      seed: rng.int(0, 99),
      cacheSalt: [null, "x"][rng.int(0, 2)],
    };
    try {
      requests.push(engine.addRequest(prompt, params));
    } catch (err) {
      assert.match(String(err), /KV blocks of/, "only a prompt the pool cannot hold is refused");
    }
  };
  for (let i = rng.int(1, 8); i > 0; i--) add();
  for (let steps = 0; engine.hasUnfinishedRequests(); steps++) {
    assert.ok(steps < 5000, "the engine terminates");
    const r = rng.int(0, 40);
    if (r === 0) add();
    if (r === 3 && engine.scheduler.running.length < engine.config.maxNumSeqs) {
      const ctx = rng.int(0, Math.min(20, maxModelLen - 2));
      const prompt = Array.from({ length: ctx + 1 }, () => rng.int(1, model.vocabSize));
      const q = engine.injectRunning(prompt, ctx, {
        maxTokens: rng.int(1, 5),
        cacheSalt: `inj-${requests.length}`,
      });
      if (q) {
        requests.push(q);
        injected.add(q);
      }
    }
    if (r === 1 || r === 2) {
      const live = requests.filter((q) => q.status !== "finished");
      if (live.length) {
        const victim = live[rng.int(0, live.length)];
        cut.add(victim);
        if (r === 1) engine.abort(victim.requestId);
        else engine.shed(victim.requestId);
      }
    }
    const obs = await engine.step();
    if (obs === null) assert.not.ok(engine.hasUnfinishedRequests(), "idle only when done");
  }
  await engine.drain();
  for (const q of requests) {
    assert.is(q.status, "finished");
    if (injected.has(q)) continue; // its KV was never computed: any tokens will do
    const ref = referenceGenerate(Array.from(q.promptTokenIds), q.params, model);
    if (cut.has(q) || q.finishReason === "kv_capacity") {
      assert.equal(q.outputTokenIds, ref.slice(0, q.outputTokenIds.length));
    } else {
      assert.equal(q.outputTokenIds, ref, `request ${q.requestId} (async ${asyncScheduling})`);
      assert.ok(q.finishReason === "stop" || q.finishReason === "length");
    }
  }
  const u = engine.kvUsage();
  assert.equal([u.free, u.pendingFree, u.numRequests], [u.total, 0, 0], "the pool drains");
  assert.ok(engine.resetPrefixCache());
}

test("500 random workloads: full outputs equal one-at-a-time generation, cut ones are prefixes, the pool drains", async () => {
  for (let seed = 0; seed < 500; seed++) {
    try {
      await runWorkload(seed);
    } catch (err) {
      throw new Error(`workload seed ${seed}: ${(err as Error).message}`, { cause: err });
    }
  }
});

test.run();
