/**
 * Shadows of parked chains (CPU double: it reads every token back through the block
 * table, so its output proves which KV a shadow read): full blocks shared by refcount,
 * a private tail by copy-on-write (the copy rides the admission step) or zero-filled
 * without it; `ignore_eos`; all or nothing over slots; steady steps allocate nothing;
 * cleanup drops the shared references and frees only the tails.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { Engine } from "../../../src/engine/engine.ts";
import type { DecodeSeedRequest } from "../../../src/bench/decode_seeder.ts";
import { registerShadows, SHADOW_METHOD } from "../../../src/bench/kvwarm/shadows.ts";
import { chainSalt, ChainStage } from "../../../src/bench/kvwarm/stage.ts";
import { decodePlan } from "../../../src/bench/partition.ts";
import { referenceGenerate } from "../../engine/cpu_test_model.ts";
import { cpuEngine, eligibleGate } from "./kvwarm_harness.ts";

const STEADY = 3;

async function parkedChains(engine: Engine, batch: number, depth: number): Promise<ChainStage> {
  const stage = new ChainStage(
    { batch, depth, points: [], chainBlocks: batch * Math.ceil(depth / 4), tailBlocks: 0 },
    { engine, content: eligibleGate(engine).content!, rank: 0 },
  );
  stage.start();
  while (stage.phase === "building") stage.check(await engine.step(), false);
  if (!stage.ok) throw new Error(`test set-up: ${stage.reason}`);
  return stage;
}

/** The requests of decode point (batch, totalKv) with `STEADY` steady steps. */
function requests(batch: number, totalKv: number): DecodeSeedRequest[] {
  return decodePlan(totalKv, batch).map((s, slot) => ({
    requestId: `m${slot}`,
    slot,
    prompt: new Int32Array(s.promptTokens),
    computed: s.computed,
    cacheSalt: `bench:test:${slot}`,
    maxTokens: 1 + STEADY,
  }));
}

const refs = (engine: Engine, ids: readonly number[]) =>
  ids.map((b) => engine.kv.pool.blocks[b].refCnt);

test("copy-on-write: shared full blocks, a private tail whose copy rides the admission step, the chain's KV read exactly", async () => {
  const { engine, model } = cpuEngine(); // strict: an unwritten slot read throws
  const stage = await parkedChains(engine, 2, 30);
  const chain = stage.chains.map((c) => engine.blockIds(c.requestId)[0]);
  const free = engine.kvUsage().free;
  // B2 K46: ctx 23 each, admitted at 22 computed: blocks 0..4 shared, block 5 (20..23)
  // copied, tail = blocks(22 + 1 + 3) - 5 = 2 blocks per slot
  const out = registerShadows(engine, (i) => chainSalt(0, i), requests(2, 46), { cow: true });
  assert.ok(out.ok);
  if (!out.ok) return;
  assert.equal([out.method, out.blocks], [SHADOW_METHOD, 4]);
  for (const [i, s] of out.requests.entries()) {
    const t = engine.blockIds(s.requestId)[0];
    assert.equal(t.slice(0, 5), chain[i].slice(0, 5), "full blocks shared");
    assert.equal(refs(engine, t.slice(0, 5)), [2, 2, 2, 2, 2]);
    assert.equal(refs(engine, t.slice(5)), [1, 1], "the tail is private");
    assert.is(engine.kv.pool.blocks[chain[i][5]].refCnt, 2, "the copy holds its source");
    assert.equal(
      Array.from(s.promptTokenIds),
      Array.from(stage.chains[i].promptTokenIds.subarray(0, 23)),
    );
    assert.equal([s.cacheSalt, s.params.ignoreEos, s.status], [`bench:test:${i}`, true, "running"]);
  }
  const inUse: number[] = [];
  const obs: [number, number, number][] = [];
  engine.onStep((o) => {
    inUse.push(engine.kvUsage().inUse);
    obs.push([o.numPrefillRequests, o.numDecodeRequests, o.numBlockCopies]);
  });
  await engine.runUntilDone();
  assert.equal(obs, [[2, 0, 2], [0, 2, 0], [0, 2, 0], [0, 2, 0]]);
  // (the last step's update finishes the shadows and frees their tails)
  assert.equal(new Set(inUse.slice(0, -1)).size, 1, "steady steps allocate nothing");
  assert.ok(inUse.at(-1)! < inUse[0]);
  assert.ok(model.batches.at(-4)!.blockCopies.length === 2);
  for (const [i, s] of out.requests.entries()) {
    // the double generates from the KV it reads: exactly a standalone run of the prompt
    assert.equal(
      s.outputTokenIds,
      referenceGenerate(Array.from(s.promptTokenIds), { maxTokens: 4, ignoreEos: true }, model),
    );
    assert.equal(refs(engine, chain[i]), new Array(8).fill(1), "shared references dropped");
  }
  assert.is(engine.kvUsage().free, free, "only the tails were freed");
  assert.ok(stage.chains.every((c) => c.status === "parked"), "the chains stay parked");
});

test("without copy-on-write: no copy; the admission step zero-fills each first tail block", async () => {
  const { engine, model } = cpuEngine({ strictKv: false });
  await parkedChains(engine, 2, 30);
  const out = registerShadows(engine, (i) => chainSalt(0, i), requests(2, 46), { cow: false });
  assert.ok(out.ok);
  if (!out.ok) return;
  const firstTail = out.requests.map((s) => engine.blockIds(s.requestId)[0][5]);
  const n = model.batches.length;
  await engine.runUntilDone();
  const admission = model.batches[n];
  assert.equal([admission.blockCopies, admission.blockZeros], [[], firstTail]);
  assert.ok(model.batches.slice(n + 1).every((b) => (b.blockZeros ?? []).length === 0));
  // positions 20, 21 read a block that never held the chain's tokens: another context
  const s = out.requests[0];
  assert.not.equal(
    s.outputTokenIds,
    referenceGenerate(Array.from(s.promptTokenIds), { maxTokens: 4, ignoreEos: true }, model),
  );
});

test("all or nothing over slots: a tail that does not fit sheds the shadows registered before it", async () => {
  const { engine } = cpuEngine({ numBlocks: 20 }); // 19 usable; two chains of 8 blocks
  const stage = await parkedChains(engine, 2, 30);
  const before = engine.kvUsage();
  const chain = stage.chains.map((c) => engine.blockIds(c.requestId)[0]);
  const out = registerShadows(engine, (i) => chainSalt(0, i), requests(2, 46), { cow: true });
  assert.not.ok(out.ok);
  if (out.ok) return;
  assert.match(out.reason, /^shadow_registration_failed: slot 1 on __kvwarm_0_1 .* 1 blocks free/);
  assert.equal(engine.kvUsage(), before, "slot 0's tail and its copy hold were given back");
  for (const c of chain) assert.equal(refs(engine, c), new Array(8).fill(1));
  assert.not.ok(engine.hasUnfinishedRequests());
});

test.run();
