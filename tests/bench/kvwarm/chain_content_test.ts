/**
 * Chain content: chain i is the collection pool shuffled with the seed
 * `content-v1:{seed}:{rank}:{i}`, conversations appended in that order, and a chain only
 * ever extends.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ChainContent, chainContentSeed } from "../../../src/bench/kvwarm/chain_content.ts";
import { isCollectionBody } from "../../../src/bench/text_pool.ts";
import { Rng } from "../../../src/util/rng.ts";
import { corpusBodies, qwen3Tokenizer, VOCAB } from "./kvwarm_harness.ts";

const pool = corpusBodies().bodies.filter(isCollectionBody);

function content(seed = "0", rank = 0, bodies: readonly string[] = pool): ChainContent {
  return new ChainContent({
    bodies,
    tokenizer: qwen3Tokenizer(),
    contentSeed: seed,
    rank,
    vocabSize: VOCAB,
  });
}

/** The design's definition, written out: a full Fisher-Yates from the front. */
function reference(chain: number, length: number, seed = "0", rank = 0): Int32Array {
  const order = pool.map((_, i) => i);
  const rng = Rng.fromSeed(chainContentSeed(seed, rank, chain));
  const out: number[] = [];
  for (let k = 0; out.length < length; k++) {
    const j = rng.int(k, order.length);
    [order[k], order[j]] = [order[j], order[k]];
    out.push(...qwen3Tokenizer().encode(pool[order[k]] + "\n"));
  }
  return Int32Array.from(out.slice(0, length));
}

test("chain i is the collection pool shuffled by content-v1:{seed}:{rank}:{i}, conversations appended in order", () => {
  assert.is(chainContentSeed("7", 1, 3), "content-v1:7:1:3");
  const c = content();
  for (const i of [0, 1, 5]) assert.equal(c.tokens(i, 300), reference(i, 300), `chain ${i}`);
  assert.equal(content("7", 1).tokens(2, 200), reference(2, 200, "7", 1));
});

test("a chain only extends: a shorter request is a prefix of a longer one, in any order", () => {
  const a = content(), b = content();
  const long = a.tokens(4, 500);
  assert.equal(a.tokens(4, 120), long.subarray(0, 120));
  assert.equal(b.tokens(4, 120), long.subarray(0, 120));
  assert.equal(b.tokens(4, 500), long);
  assert.equal(a.tokens(4, 0).length, 0);
});

test("chains differ by index, rank and seed; the same seed draws the same chain after a release", () => {
  const c = content();
  const x = c.tokens(0, 64);
  assert.not.equal(c.tokens(1, 64), x);
  assert.not.equal(content("0", 1).tokens(0, 64), x);
  assert.not.equal(content("1", 0).tokens(0, 64), x);
  const used = c.conversationsTokenized;
  c.release();
  assert.equal(c.tokens(0, 64), x);
  assert.ok(c.conversationsTokenized > used, "released conversations are tokenized again");
});

test("conversations are tokenized once and shared by every chain that draws them", () => {
  const few = pool.slice(0, 4);
  const c = content("0", 0, few);
  const total = few.reduce((s, body) => s + qwen3Tokenizer().encode(body + "\n").length, 0);
  for (let i = 0; i < 5; i++) assert.is(c.tokens(i, total).length, total);
  assert.equal([c.conversationsTokenized, c.tokensTokenized], [4, total]);
  assert.throws(() => c.tokens(0, total + 1), /holds all 4 conversations/);
  assert.throws(() => c.tokens(-1, 4), /non-negative integer/);
});

test("prepare tokenizes what the plan reads, then holds only that: more throws, a failed chain rethrows", () => {
  const c = content();
  const expected = [reference(0, 400), reference(1, 250), reference(2, 250)];
  assert.is(c.prepareSeconds, 0);
  c.prepare([400, 250, 250]);
  assert.ok(c.prepared);
  // its time goes to the artifact (kvwarm.chains.prepare_seconds)
  assert.ok(c.prepareSeconds > 0);
  assert.is(c.info(1024, 0.5).prepare_seconds, c.prepareSeconds);
  for (const [i, tokens] of expected.entries()) assert.equal(c.tokens(i, tokens.length), tokens);
  assert.equal(c.tokens(0, 100), expected[0].subarray(0, 100));
  assert.throws(() => c.tokens(1, 251), /chain 1 was prepared to 250 tokens; 251 are asked/);
  assert.throws(() => c.tokens(3, 1), /chain 3 was prepared to 0 tokens/);
  assert.throws(() => c.prepare([1]), /prepared already/);

  const few = pool.slice(0, 4);
  const shallow = content("0", 0, few);
  const total = few.reduce((s, body) => s + qwen3Tokenizer().encode(body + "\n").length, 0);
  shallow.prepare([total, total + 1]);
  assert.is(shallow.tokens(0, total).length, total);
  assert.throws(
    () => shallow.tokens(1, 1),
    /content_too_shallow: chain 1 holds all 4 conversations/,
  );
});

test.run();
