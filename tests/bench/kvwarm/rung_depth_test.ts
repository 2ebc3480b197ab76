/**
 * A rung's chain depth is the deepest that fits the pool among its points' full spans and
 * their prompts alone (a point is real at its prompt's depth, its steady tokens in the shadow's
 * private tail), and a point planned so runs on the chain's KV (CPU double, every number
 * exact).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BenchCapacity } from "../../../src/bench/artifact.ts";
import type { DecodeSeedRequest } from "../../../src/bench/decode_seeder.ts";
import { planKvwarm } from "../../../src/bench/kvwarm/plan.ts";
import { registerShadows } from "../../../src/bench/kvwarm/shadows.ts";
import { chainSalt, ChainStage } from "../../../src/bench/kvwarm/stage.ts";
import { decodePlan } from "../../../src/bench/partition.ts";
import { decodePoint } from "../../../src/bench/point.ts";
import { referenceGenerate } from "../../engine/cpu_test_model.ts";
import { capacityOf, cpuEngine, eligibleGate, VOCAB } from "./kvwarm_harness.ts";

const SAMPLES = 3;

function capacity(usable: number): BenchCapacity {
  return {
    block_size: 4,
    blocks_total: usable,
    watermark_blocks: 0,
    usable_blocks: usable,
    max_model_len: 128,
    max_num_seqs: 8,
    max_batched_tokens: 64,
    prefix_caching: true,
  };
}

// decode:B1:K40: ctx 40, admitted at 39 computed, prompt 40 tokens. Need (full steady span)
// 43 -> 11 chain blocks + tail blocks(43) - floor(39/4) = 2 -> 13 blocks. At depth 40 (the
// prompt lies in the chain; steady tokens 40..42 in the private tail): 10 + 2 = 12 blocks.

test("a rung that fits only at its point's prompt depth is planned there, not a capacity fallback", () => {
  const plan = planKvwarm([decodePoint(1, 40)], capacity(12), SAMPLES);
  assert.equal(plan.capacityFallbacks, [], "depth 40 fits 12 blocks: no capacity fallback");
  assert.equal(plan.rungs.map((r) => [r.batch, r.depth, r.points.length]), [[1, 40, 1]]);
});

test("a deep point whose prompt fits is not capped to a shallower point's need", () => {
  // decode:B1:K8: ctx 8, computed 7, need 11 -> 3 chain blocks + 2 tail blocks
  const plan = planKvwarm([decodePoint(1, 40), decodePoint(1, 8)], capacity(12), SAMPLES);
  assert.equal(plan.rungs.map((r) => [r.depth, r.points.length]), [[40, 2]]);
  assert.equal([...plan.fallbacks.keys()], [], "no point needs fake KV");
});

test("a point at its prompt's depth (40 tokens in 12 blocks) runs on the chain's KV, exactly", async () => {
  const { engine, model } = cpuEngine({ numBlocks: 13, blockSize: 4, maxModelLen: 128 });
  assert.is(capacityOf(engine).usable_blocks, 12);
  const stage = new ChainStage(
    { batch: 1, depth: 40, points: [], chainBlocks: 10, tailBlocks: 2 },
    { engine, content: eligibleGate(engine).content!, rank: 0 },
  );
  stage.start();
  while (stage.phase === "building") stage.check(await engine.step(), false);
  assert.ok(stage.ok, `stage: ${stage.reason}`);
  const requests: DecodeSeedRequest[] = decodePlan(40, 1).map((s, slot) => ({
    requestId: `m${slot}`,
    slot,
    prompt: new Int32Array(s.promptTokens),
    computed: s.computed,
    cacheSalt: `bench:review:${slot}`,
    maxTokens: 1 + SAMPLES,
  }));
  const out = registerShadows(engine, (i) => chainSalt(0, i), requests, { cow: true });
  assert.ok(out.ok, out.ok ? "" : out.reason);
  if (!out.ok) return;
  assert.is(engine.kvUsage().free, 0, "the chain and the tail take the whole pool");
  const shadow = out.requests[0];
  for (let k = 0; k < 1 + SAMPLES; k++) await engine.step();
  while (engine.numInFlightSteps > 0) await engine.step();
  const ref = referenceGenerate(Array.from(shadow.promptTokenIds), {
    maxTokens: 1 + SAMPLES,
    ignoreEos: true,
  }, { vocabSize: VOCAB, eosTokenIds: model.eosTokenIds, maxModelLen: 1 << 20 });
  assert.equal(shadow.outputTokenIds, ref, "admission + 3 steady steps read the chain's KV");
  assert.is(shadow.numPreemptions, 0);
});

test.run();
