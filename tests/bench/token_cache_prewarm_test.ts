/**
 * The bundle's token-cache prewarm: what it writes is what the real-text pool and kvwarm's
 * chains ask the Qwen3 tokenizer for, so a run over the prewarmed cache never loads the
 * vocabulary, and the ids are the tokenizer's own.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chainText } from "../../src/bench/kvwarm/chain_content.ts";
import { loadCollection, loadTextPool } from "../../src/bench/text_pool.ts";
import { cachedTokenizer } from "../../src/bench/token_cache.ts";
import { prewarmTokenCache } from "../../src/bench/token_cache_prewarm.ts";
import { ModelTokenizer, qwen3TokenizerJsonPath } from "../../src/model/tokenizer.ts";

test("a prewarmed cache serves the text pool and the chains' conversations without loading the tokenizer", () => {
  const dir = mkdtempSync(join(tmpdir(), "token-prewarm-"));
  const rec = prewarmTokenCache(dir, { poolTokens: 3000, chainBodies: 40 });
  assert.ok(rec.poolTokens >= 3000 && rec.chainBodies === 40 && rec.chainTokens > 40, `${rec}`);
  const json = qwen3TokenizerJsonPath();
  const never = cachedTokenizer(json, () => {
    throw new Error("the prewarmed cache should have held this text");
  }, dir);
  const pool = loadTextPool(never, { minTokens: 3000, vocabSize: 151936 });
  assert.is(pool.tokens.length, rec.poolTokens);
  const { collection } = loadCollection();
  const real = ModelTokenizer.fromFile(json);
  for (let i = 0; i < 40; i++) {
    const text = chainText(collection[i]);
    assert.equal(Array.from(never.encode(text)), Array.from(real.encode(text)), `body ${i}`);
  }
  // a text it did not tokenize goes to the tokenizer (here: the loader that refuses)
  assert.throws(() => never.encode(chainText(collection[40])), /should have held/);
});

test.run();
