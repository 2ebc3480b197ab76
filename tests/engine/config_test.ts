import { test } from "uvu";
import * as assert from "uvu/assert";
import { engineConfig } from "../../src/engine/engine_config.ts";
import { generationParams } from "../../src/engine/generation_params.ts";

const model = { maxModelLen: 1024 };

test("engine config: defaults filled from the model, frozen", () => {
  const c = engineConfig(model);
  assert.is(c.maxModelLen, 1024);
  assert.is(c.asyncScheduling, false);
  assert.ok(Object.isFrozen(c));
  assert.is(engineConfig(model, { maxModelLen: 512 }).maxModelLen, 512);
});

test("engine config: bad values are named", () => {
  assert.throws(
    () => engineConfig(model, { maxNumSeqs: 0 }),
    /maxNumSeqs must be a positive integer/,
  );
  assert.throws(() => engineConfig(model, { maxModelLen: 2048 }), /exceeds the model's 1024/);
  assert.throws(() => engineConfig(model, { watermark: 1.5 }), /watermark/);
  assert.throws(
    () => engineConfig(model, { enableChunkedPrefill: false, maxNumBatchedTokens: 100 }),
    /without chunked prefill maxNumBatchedTokens \(100\) must be >= maxModelLen \(1024\)/,
  );
  assert.throws(
    () => engineConfig(model, { maxNumSeq: 3 } as unknown as Record<string, number>),
    /unknown engine config field "maxNumSeq"/,
  );
});

test("engine config: defaults shrink to the model's step limits; larger explicit values are refused", () => {
  const model = { maxModelLen: 512, maxNumTokens: 256, maxNumSeqs: 32 };
  const c = engineConfig(model);
  assert.is(c.maxNumBatchedTokens, 256);
  assert.is(c.maxNumSeqs, 32);
  assert.throws(() => engineConfig(model, { maxNumBatchedTokens: 257 }), /exceeds the 256 tokens/);
  assert.throws(() => engineConfig(model, { maxNumSeqs: 33 }), /exceeds the 32 sequences/);
});

test("generation params: defaults, validation, frozen", () => {
  const p = generationParams({ cacheSalt: "s", maxTokens: 4 });
  assert.equal({ ...p }, {
    maxTokens: 4,
    ignoreEos: false,
    temperature: 0,
    seed: 0,
    cacheSalt: "s",
  });
  assert.ok(Object.isFrozen(p));
  assert.throws(() => generationParams({ temperature: -1 }), /temperature/);
  assert.throws(() => generationParams({ seed: 0.5 }), /seed must be an integer/);
  assert.throws(
    () => generationParams({ max_tokens: 3 } as unknown as Record<string, number>),
    /unknown generation param "max_tokens"/,
  );
});

test.run();
