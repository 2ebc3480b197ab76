/**
 * A kvwarm stage on the engine (CPU double, strict KV: reading a slot no step wrote
 * throws): B chains chunk-prefilled by the real scheduler park once their in-flight token
 * has arrived; the next rung's chain extends the previous one's cached blocks
 * (generational extension: tokens computed vs reused); a pool shortfall, a vanished
 * chain or the soft timeout mid-build fails the stage; shedding honours the
 * deferred-free fence, and the prefix cache can only be reset once the fence drained.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { Engine } from "../../../src/engine/engine.ts";
import type { StepObservation } from "../../../src/engine/step_observation.ts";
import type { Rung } from "../../../src/bench/kvwarm/plan.ts";
import { chainSalt, ChainStage } from "../../../src/bench/kvwarm/stage.ts";
import { stageProgressLine } from "../../../src/bench/kvwarm/kvwarm_seeder.ts";
import { cpuEngine, eligibleGate } from "./kvwarm_harness.ts";

function rung(batch: number, depth: number, chainBlocks = batch * Math.ceil(depth / 4)): Rung {
  return { batch, depth, points: [], chainBlocks, tailBlocks: 0 };
}

function stageOf(engine: Engine, r: Rung): ChainStage {
  return new ChainStage(r, { engine, content: eligibleGate(engine).content!, rank: 0 });
}

/** Steps until the stage is done; every observation, and the chains' state after each step. */
async function build(engine: Engine, stage: ChainStage) {
  const seen: { o: StepObservation | null; chains: [string, number][] }[] = [];
  stage.start();
  while (stage.phase === "building") {
    const o = await engine.step();
    stage.check(o, false);
    seen.push({ o, chains: stage.chains.map((c) => [c.status, c.numOutputPlaceholders]) });
  }
  return seen;
}

test("B chains with stable salts are chunk-prefilled by the scheduler and park with their blocks resident", async () => {
  const { engine } = cpuEngine();
  const gate = eligibleGate(engine);
  const stage = new ChainStage(rung(2, 30), { engine, content: gate.content!, rank: 0 });
  const seen = await build(engine, stage);
  assert.ok(stage.ok, stage.reason ?? "");
  assert.equal(stage.chains.map((c) => c.requestId), [chainSalt(0, 0), chainSalt(0, 1)]);
  assert.equal(stage.chains.map((c) => c.cacheSalt), ["__kvwarm_0_0", "__kvwarm_0_1"]);
  for (const [i, c] of stage.chains.entries()) {
    assert.equal([c.status, c.numComputedTokens, c.numOutputPlaceholders], ["parked", 30, 0]);
    assert.equal(Array.from(c.promptTokenIds), Array.from(gate.content!.tokens(i, 30)));
    assert.is(engine.blockIds(c.requestId)[0].length, 8);
  }
  assert.ok(seen.every(({ chains }) => chains.every(([s, p]) => s !== "parked" || p === 0)));
  assert.equal(seen.map(({ o }) => o?.sumPrefillTokens ?? 0).reduce((a, b) => a + b), 60);
  assert.not.ok(engine.hasUnfinishedRequests(), "parked chains are not pending work");
  const rec = stage.record(7);
  assert.equal(
    [rec.batch, rec.depth, rec.tokens_computed, rec.tokens_reused, rec.ok, rec.settle_round],
    [2, 30, 60, 0, true, 7],
  );
});

test("generational extension: the next rung's chain 0 hits the shed chain's cached blocks and computes only the extension", async () => {
  const { engine } = cpuEngine();
  const obs: StepObservation[] = [];
  engine.onStep((o) => obs.push(o));
  const first = stageOf(engine, rung(2, 30));
  await build(engine, first);
  const kept = engine.blockIds(chainSalt(0, 0))[0].slice(0, 7);
  first.shed(1); // chain 1 first, so chain 0's blocks are evicted last
  assert.equal(first.chains.map((c) => c.status), ["finished", "finished"]);
  assert.is(engine.getRequest(chainSalt(0, 0)), undefined);
  const before = obs.length;
  const second = stageOf(engine, rung(1, 50));
  await build(engine, second);
  assert.ok(second.ok);
  assert.equal(engine.blockIds(chainSalt(0, 0))[0].slice(0, 7), kept, "the same blocks, reused");
  const rec = second.record(null);
  assert.equal([rec.tokens_reused, rec.tokens_computed], [28, 22]);
  const built = obs.slice(before).filter((o) => o.numPrefillRequests > 0);
  assert.equal(built.map((o) => [o.sumPrefillTokens, o.sumPrefillKvTokens]), [[22, 28]]);
});

test("progress: the tokens the chains hold of batch x depth, and those the stage computed", async () => {
  const { engine } = cpuEngine();
  const first = stageOf(engine, rung(2, 30));
  assert.equal(first.progress(), { tokens: 0, total: 60, computed: 0, seconds: 0 });
  const held: number[] = [];
  first.start();
  while (first.phase === "building") {
    first.check(await engine.step(), false);
    held.push(first.progress().tokens);
  }
  assert.ok(held.every((t, i) => i === 0 || t >= held[i - 1]), `held ${held}`);
  assert.equal([first.progress().tokens, first.progress().computed], [60, 60]);
  first.shed(1);
  const second = stageOf(engine, rung(1, 50));
  await build(engine, second);
  const p = second.progress();
  assert.equal(
    [p.tokens, p.total, p.computed],
    [50, 50, 22],
    "28 reused tokens held, not computed",
  );
  assert.ok(p.seconds > 0);
  assert.is(
    stageProgressLine(64, { tokens: 131008, total: 524032, computed: 131008, seconds: 10 }),
    "kvwarm: stage B64: 131008 of 524032 tokens (25%) in 10.0 s, ETA 0:30",
  );
  assert.match(
    stageProgressLine(2, { tokens: 0, total: 60, computed: 0, seconds: 0 }),
    /B2: 0 of 60 tokens \(0%\) in 0\.0 s, ETA \?$/,
  );
});

test("a pool shortfall fails the stage before any chain is added, or when a chain is preempted", async () => {
  const small = cpuEngine({ numBlocks: 20 }).engine; // 19 usable blocks
  const short = stageOf(small, rung(2, 40)); // 20 blocks
  short.start();
  assert.equal([short.phase, short.ok], ["done", false]);
  assert.match(
    short.reason!,
    /^pool_shortfall: 2 chains of 40 tokens .* need 20 blocks; 19 are free/,
  );
  assert.equal(short.chains.length, 0);
  assert.not.ok(small.hasUnfinishedRequests());
  // planned against a larger pool (10 blocks declared): the scheduler preempts a chain
  const lied = stageOf(small, rung(2, 40, 10));
  await build(small, lied);
  assert.match(lied.reason!, /^pool_shortfall: chain __kvwarm_0_\d was preempted mid-build$/);
  lied.shed();
  await small.drain();
  assert.is(small.kvUsage().free, 19);
});

test("a chain that vanishes mid-build fails the stage", async () => {
  const { engine } = cpuEngine();
  const stage = stageOf(engine, rung(2, 100));
  stage.start();
  stage.check(await engine.step(), false);
  assert.is(stage.phase, "building");
  engine.abort(chainSalt(0, 1));
  stage.check(await engine.step(), false);
  assert.equal([stage.phase, stage.reason], [
    "done",
    "chain_vanished: __kvwarm_0_1 finished (abort)",
  ]);
});

test("the soft timeout mid-build: the stage fails, its chains are shed behind the fence, the cache resets only after the drain", async () => {
  const { engine } = cpuEngine();
  const stage = stageOf(engine, rung(2, 100));
  stage.start();
  stage.check(await engine.step(), false);
  assert.is(engine.numInFlightSteps, 1, "async: the next chunk is in flight");
  stage.check(null, true);
  assert.equal([stage.phase, stage.ok, stage.reason], [
    "done",
    false,
    "soft_timeout: the soft timeout passed mid-build",
  ]);
  stage.shed();
  assert.equal(stage.chains.map((c) => [c.status, c.finishReason]), [
    ["finished", "shed"],
    ["finished", "shed"],
  ]);
  const fenced = engine.kvUsage();
  assert.ok(fenced.pendingFree > 0, "blocks the in-flight step reads are not free yet");
  assert.not.ok(engine.resetPrefixCache(), "no reset while a free is fenced");
  await engine.drain();
  const u = engine.kvUsage();
  assert.equal([u.pendingFree, u.free, u.inUse], [0, u.total, 0]);
  assert.ok(engine.resetPrefixCache());
  assert.is(engine.kvUsage().cached, 0);
  assert.not.ok(engine.hasUnfinishedRequests(), "a shed chain is never re-admitted");
  assert.is(await engine.step(), null);
});

test("synchronous scheduling builds the same chains", async () => {
  const { engine } = cpuEngine({}, { asyncScheduling: false });
  const stage = stageOf(engine, rung(3, 45));
  await build(engine, stage);
  assert.ok(stage.ok);
  assert.equal(stage.record(null).tokens_computed, 135);
});

test.run();
