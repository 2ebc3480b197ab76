import { test } from "uvu";
import * as assert from "uvu/assert";
import { WARMUP, warmupShape } from "../../src/bench/warmup.ts";
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
