import { test } from "uvu";
import * as assert from "uvu/assert";
import { WARMUP, warmUp, warmupShape } from "../../src/bench/warmup.ts";
import { StepDriver } from "../../src/bench/step_driver.ts";
import { randomContent } from "../../src/bench/prompt_content.ts";
import { SaltScheme } from "../../src/bench/salts.ts";
import { cpuBench } from "./bench_harness.ts";
import { ManifestError } from "../../src/bench/manifest.ts";
import type { BenchCapacity } from "../../src/bench/artifact.ts";

const roomy: BenchCapacity = {
  block_size: 16,
  blocks_total: 1000,
  watermark_blocks: 10,
  usable_blocks: 990,
  max_model_len: 4096,
  max_num_seqs: 8,
  max_batched_tokens: 2048,
  prefix_caching: true,
};

test("the warm-up keeps the design's 256 tokens x 5 steps where the envelope holds them", () => {
  assert.equal(warmupShape(roomy), { promptTokens: WARMUP.promptTokens, steps: WARMUP.steps });
});

test("the warm-up prompt shrinks to the step budget, the model length and the KV pool", () => {
  assert.is(warmupShape({ ...roomy, max_batched_tokens: 64 }).promptTokens, 64);
  // 100 - 5 steps - 1
  assert.is(warmupShape({ ...roomy, max_model_len: 100 }).promptTokens, 94);
  // one usable block of 16: 16 tokens less the 5 steps' tokens
  assert.is(warmupShape({ ...roomy, usable_blocks: 1 }).promptTokens, 11);
});

test("the clock warm-up's requests take up to 2048 prompt tokens, fitted to the envelope", () => {
  const shape = warmupShape(roomy, WARMUP, 2);
  assert.equal(shape, { ...WARMUP, clockSeconds: 2, clockPromptTokens: 2048 });
  assert.is(warmupShape({ ...roomy, max_batched_tokens: 512 }, WARMUP, 2).clockPromptTokens, 512);
  assert.is(warmupShape({ ...roomy, max_model_len: 300 }, WARMUP, 2).clockPromptTokens, 298);
  assert.is(warmupShape({ ...roomy, usable_blocks: 10 }, WARMUP, 2).clockPromptTokens, 158);
  assert.throws(() => warmupShape(roomy, WARMUP, -1), /clockSeconds -1 must be >= 0/);
});

test("the clock warm-up ends when the group says so, whatever this rank's clock", async () => {
  const b = cpuBench(null);
  const votes: boolean[] = [];
  const record = await warmUp(
    new StepDriver(b.engine),
    randomContent(b.engine.model.vocabSize, "0", 0),
    new SaltScheme("run", 0),
    { promptTokens: 8, steps: 3, clockSeconds: 3600, clockPromptTokens: 32 },
    (timeUp) => {
      votes.push(timeUp);
      return Promise.resolve(votes.length === 3); // another rank's time was up
    },
  );
  assert.equal(votes, [false, false, false], "asked before the first request and after each");
  assert.equal([record.clock!.requests, record.clock!.steps], [2, 4]);
});

test("an envelope that cannot hold a one-token warm-up is refused as input, naming the fix", () => {
  const err = (c: BenchCapacity) => {
    try {
      warmupShape(c);
    } catch (e) {
      return e as ManifestError;
    }
    throw new Error("not refused");
  };
  const len = err({ ...roomy, max_model_len: 6 });
  assert.instance(len, ManifestError);
  assert.match(len.message, /raise --max-model-len$/);
  const pool = err({ ...roomy, block_size: 4, usable_blocks: 1 });
  assert.match(pool.message, /the KV pool holds 4 tokens .* raise --kv-cache-gb$/);
});

test.run();
