/**
 * On the GPU (lavapipe, tiny-qwen3-moe): the KV a shadow reads is bit-identical to its
 * chain's KV at every shared position, read back from the K and V cache buffers of
 * every layer: the full blocks are the chain's own, and the partial block is a
 * copy-on-write copy that the admission step made. Without copy-on-write the admission
 * step zero-fills that block instead (here a block that held another shadow's data).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { Engine } from "../../../src/engine/engine.ts";
import { readBuffer } from "../../../src/gpu/buffers.ts";
import { GpuModel } from "../../../src/model/gpu_model.ts";
import { ModelTokenizer } from "../../../src/model/tokenizer.ts";
import { probeKvwarmGate } from "../../../src/bench/kvwarm/gate.ts";
import { registerShadows } from "../../../src/bench/kvwarm/shadows.ts";
import { chainSalt, ChainStage } from "../../../src/bench/kvwarm/stage.ts";
import { ensureFixture } from "../../../scripts/fixtures.ts";
import { sharedGpu } from "../../shared_gpu.ts";
import { corpusBodies } from "./kvwarm_harness.ts";

const gpu = await sharedGpu();
const dir = ensureFixture("tiny-qwen3-moe").dir;
// 10 usable blocks: two chains of 60 tokens (4 blocks each) and two one-block shadow tails
const model = await GpuModel.load(gpu, dir, {
  numBlocks: 11,
  maxNumTokens: 64,
  maxNumSeqs: 4,
  maxModelLen: 256,
});
const engine = new Engine(model, {
  asyncScheduling: false,
  maxNumBatchedTokens: 64,
  maxNumSeqs: 4,
});
const bs = model.blockSize;
const cfg = model.config;
const tokenBytes = cfg.numKvHeads * cfg.headDim * (model.weights.dtype === "f16" ? 2 : 4);
const COMPUTED = 45; // blocks 0, 1 shared; block 2 holds positions 32..44 of the chain

/** Every layer's K and V cache, as bytes. */
async function caches(): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for (const layer of model.kv.layers) {
    for (const buf of [layer.k, layer.v]) {
      out.push(new Uint8Array(await readBuffer(gpu.device, buf.buffer, buf.size, buf.offset)));
    }
  }
  return out;
}

/** The bytes of position `p` through block table `table`. */
function at(cache: Uint8Array, table: readonly number[], p: number): Uint8Array {
  const slot = table[Math.floor(p / bs)] * bs + (p % bs);
  return cache.subarray(slot * tokenBytes, (slot + 1) * tokenBytes);
}

const same = (a: Uint8Array, b: Uint8Array) => a.every((x, i) => x === b[i]);
const zero = (a: Uint8Array) => a.every((x) => x === 0);

const gate = probeKvwarmGate({
  requested: "auto",
  moe: true,
  prefixCaching: true,
  maxModelLen: engine.config.maxModelLen,
  vocabSize: model.vocabSize,
  contentSeed: "0",
  rank: 0,
  tokenizer: () => ModelTokenizer.fromDir(dir),
  bodies: corpusBodies,
});
const stage = new ChainStage(
  { batch: 2, depth: 60, points: [], chainBlocks: 8, tailBlocks: 2 },
  { engine, content: gate.content!, rank: 0 },
);
stage.start();
while (stage.phase === "building") stage.check(await engine.step(), false);
const chains = [0, 1].map((i) => engine.blockIds(chainSalt(0, i))[0]);

function shadows(cow: boolean, tag: string) {
  const out = registerShadows(
    engine,
    (i) => chainSalt(0, i),
    [0, 1].map((slot) => ({
      requestId: `${tag}${slot}`,
      slot,
      prompt: new Int32Array(COMPUTED + 1),
      computed: COMPUTED,
      cacheSalt: `${tag}${slot}`,
      maxTokens: 1,
    })),
    { cow },
  );
  if (!out.ok) throw new Error(out.reason);
  return out.requests.map((r) => engine.blockIds(r.requestId)[0]);
}

test("the chains parked with real KV", () => {
  assert.ok(stage.ok, stage.reason ?? "");
  assert.equal(chains.map((c) => c.length), [4, 4]);
});

test("copy-on-write: every layer's K and V a shadow reads at positions 0..44 is bit-identical to its chain's", async () => {
  const tables = shadows(true, "cow");
  assert.equal(tables.map((t) => t.slice(0, 2)), chains.map((c) => c.slice(0, 2)));
  assert.ok(tables.every((t, i) => t[2] !== chains[i][2]), "the partial block is a private copy");
  await engine.step(); // the admission step: the copies, then position 45
  const all = await caches();
  for (const [i, t] of tables.entries()) {
    for (const [c, cache] of all.entries()) {
      for (let p = 0; p < COMPUTED; p++) {
        assert.ok(same(at(cache, t, p), at(cache, chains[i], p)), `slot ${i} cache ${c} pos ${p}`);
      }
      assert.not.ok(zero(at(cache, t, COMPUTED - 1)), "real KV, not an empty block");
    }
  }
  await engine.runUntilDone();
});

test("without copy-on-write the admission step zero-fills the first tail block (stale data before)", async () => {
  const tables = shadows(false, "zero");
  const before = await caches();
  assert.ok(
    tables.some((t) => !zero(at(before[0], t, 33))),
    "the tail blocks held the previous shadows' data",
  );
  await engine.step();
  const after = await caches();
  for (const [i, t] of tables.entries()) {
    for (const cache of after) {
      for (let p = 0; p < 32; p++) assert.ok(same(at(cache, t, p), at(cache, chains[i], p)));
      for (let p = 32; p < COMPUTED; p++) assert.ok(zero(at(cache, t, p)), `pos ${p} zeroed`);
      assert.not.ok(zero(at(cache, t, COMPUTED)), "the admission step wrote position 45");
      assert.not.ok(zero(at(cache, chains[i], 40)), "the chain's own block is untouched");
    }
  }
  await engine.runUntilDone();
  stage.shed();
  assert.is(engine.kvUsage().inUse, 0);
});

test.run();
