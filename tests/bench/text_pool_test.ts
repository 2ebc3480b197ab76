/**
 * The real-text pool: nlp-corpus pinned by sha256, bodies split by sha256(body)[0]
 * parity (even: collection pool, odd: held out), tokenized with the model's tokenizer
 * without special tokens; failures carry the design's skip reasons.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  isCollectionBody,
  loadCollection,
  loadTextBodies,
  loadTextPool,
  TEXT_DATASET_SHA256,
  TextPoolError,
} from "../../src/bench/text_pool.ts";
import { modelTokenizer } from "../../src/bench/model_tokenizer.ts";

const tokenizer = modelTokenizer("synthetic:qwen3-30b-a3b");

test("the dataset matches its pinned sha256 and splits by sha256(body)[0] parity", () => {
  const { bodies, version } = loadTextBodies();
  assert.is(version, "4.4.0");
  assert.is(TEXT_DATASET_SHA256.length, 64);
  const even = bodies.filter(isCollectionBody);
  assert.ok(even.length > bodies.length * 0.45 && even.length < bodies.length * 0.55);
  for (const b of bodies.slice(0, 200)) {
    assert.is(isCollectionBody(b), createHash("sha256").update(b).digest()[0] % 2 === 0);
  }
});

test("the pool is the first collection bodies, tokenized without special tokens", () => {
  const pool = loadTextPool(tokenizer, { minTokens: 3000, vocabSize: 151936 });
  const { bodies } = loadTextBodies();
  const collection = bodies.filter(isCollectionBody);
  assert.ok(pool.tokens.length >= 3000);
  assert.is(pool.info.tokens, pool.tokens.length);
  assert.is(pool.info.collection_bodies, collection.length);
  assert.is(pool.info.bodies, bodies.length);
  assert.is(pool.info.collection_pool, "sha256(body)[0] even");
  const text = tokenizer.decode(pool.tokens);
  assert.ok(text.startsWith(collection[0] + "\n" + collection[1]), text.slice(0, 200));
  assert.not.ok(
    text.includes(bodies.find((b) => !isCollectionBody(b))!),
    "held-out text stays out",
  );
  assert.ok(pool.tokens.every((t) => t >= 0 && t < 151936));
});

test("a collection or tokenizer someone still holds is handed out again, not loaded twice", () => {
  const held = loadCollection();
  assert.is(loadCollection(), held);
  const { bodies } = loadTextBodies();
  assert.equal([held.bodies, held.collection.length], [
    bodies.length,
    bodies.filter(isCollectionBody).length,
  ]);
  assert.is(modelTokenizer("synthetic:qwen3-30b-a3b"), tokenizer);
});

test("a tokenizer whose ids exceed the model's vocabulary is tokenizer_unavailable", () => {
  try {
    loadTextPool(tokenizer, { minTokens: 100, vocabSize: 1000 });
    assert.unreachable();
  } catch (err) {
    assert.instance(err, TextPoolError);
    assert.is((err as TextPoolError).skipReason, "tokenizer_unavailable:vocab_mismatch");
  }
});

test("models without a tokenizer say why", () => {
  assert.throws(
    () => modelTokenizer("synthetic:mixtral-8x7b"),
    /tokenizer_unavailable:synthetic_model/,
  );
  const dir = mkdtempSync(join(tmpdir(), "webfpm-notok-"));
  try {
    assert.throws(() => modelTokenizer(dir), /tokenizer_unavailable:missing/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
