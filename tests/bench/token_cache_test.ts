/**
 * The token cache: texts a run tokenized come back from the file in the next run without the
 * tokenizer being loaded, ids unchanged; a file per tokenizer and tokenizer config; a broken
 * file is rebuilt; a failed load is not retried; two writers keep each other's texts.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdirSync, mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PoolTokenizer } from "../../src/bench/text_pool.ts";
import { cachedTokenizer, readTokenCache, tokenCacheFile } from "../../src/bench/token_cache.ts";

/** A tokenizer that counts its loads and encodes: one id per character, offset by `base`. */
function counting(json: string, base = 0) {
  const counts = { loads: 0, encodes: 0 };
  const load = (): PoolTokenizer => {
    counts.loads++;
    return {
      path: json,
      encode: (text) => {
        counts.encodes++;
        return Int32Array.from(text, (c) => base + c.charCodeAt(0));
      },
    };
  };
  return { counts, load };
}

function tokenizerFile(dir: string, name: string, content: string): string {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
}

test("a text tokenized in one run comes from the file in the next, the tokenizer not loaded", () => {
  const dir = mkdtempSync(join(tmpdir(), "token-cache-"));
  const json = tokenizerFile(dir, "a.json", '{"model":"a"}');
  const cache = join(dir, "cache");
  const first = counting(json);
  const a = cachedTokenizer(json, first.load, cache);
  assert.equal([...a.encode("hi there")], [...Int32Array.from("hi there", (c) => c.charCodeAt(0))]);
  a.encode("hi there");
  a.encode("second text");
  assert.equal(first.counts, { loads: 1, encodes: 2 }, "a repeated text is not tokenized again");
  a.flush?.();
  const second = counting(json);
  const b = cachedTokenizer(json, second.load, cache);
  assert.equal([...b.encode("second text")], [...a.encode("second text")]);
  assert.equal([...b.encode("hi there")], [...a.encode("hi there")]);
  assert.equal(second.counts, { loads: 0, encodes: 0 });
  // a new text loads the tokenizer, once
  b.encode("new");
  b.encode("newer");
  assert.equal(second.counts, { loads: 1, encodes: 2 });
  // the ids handed out are copies: changing them leaves the cache alone
  const ids = b.encode("new");
  ids[0] = -1;
  assert.is(b.encode("new")[0], "n".charCodeAt(0));
});

test("each tokenizer file has its own cache; a file that is not a cache is rebuilt", () => {
  const dir = mkdtempSync(join(tmpdir(), "token-cache-"));
  const cache = join(dir, "cache");
  const jsonA = tokenizerFile(dir, "a.json", '{"model":"a"}');
  const jsonB = tokenizerFile(dir, "b.json", '{"model":"b"}');
  const a = cachedTokenizer(jsonA, counting(jsonA, 0).load, cache);
  a.encode("x");
  a.flush?.();
  const b = counting(jsonB, 1000);
  const tb = cachedTokenizer(jsonB, b.load, cache);
  assert.is(tb.encode("x")[0], 1000 + "x".charCodeAt(0), "b's ids, not a's");
  tb.flush?.();
  assert.is(readdirSync(cache).filter((f) => f.endsWith(".bin")).length, 2);
  // garbage in a's file: read as empty, and the next flush writes a good one
  const fileA = tokenCacheFile(cache, jsonA);
  writeFileSync(fileA, "not a cache");
  assert.is(readTokenCache(fileA).size, 0);
  const again = counting(jsonA);
  const ta = cachedTokenizer(jsonA, again.load, cache);
  ta.encode("x");
  assert.is(again.counts.loads, 1);
  ta.flush?.();
  assert.equal([...readTokenCache(fileA).values()].map((v) => [...v]), [["x".charCodeAt(0)]]);
});

test("a tokenizer_config.json beside the tokenizer is part of the key", () => {
  const dir = mkdtempSync(join(tmpdir(), "token-cache-"));
  const cache = join(dir, "cache");
  const a = join(dir, "a"), b = join(dir, "b");
  for (const d of [a, b]) mkdirSync(d);
  const jsonA = tokenizerFile(a, "tokenizer.json", '{"model":"same"}');
  const jsonB = tokenizerFile(b, "tokenizer.json", '{"model":"same"}');
  writeFileSync(join(b, "tokenizer_config.json"), '{"do_lowercase_and_remove_accent":true}');
  assert.is.not(tokenCacheFile(cache, jsonA), tokenCacheFile(cache, jsonB));
  const ta = cachedTokenizer(jsonA, counting(jsonA, 0).load, cache);
  ta.encode("Hello");
  ta.flush?.();
  const lower = counting(jsonB, 500);
  assert.is(cachedTokenizer(jsonB, lower.load, cache).encode("Hello")[0], 500 + 72);
  assert.is(lower.counts.loads, 1);
});

test("a tokenizer that failed to load is not loaded again: every later miss throws its error", () => {
  const dir = mkdtempSync(join(tmpdir(), "token-cache-"));
  const json = tokenizerFile(dir, "t.json", "{}");
  let loads = 0;
  const t = cachedTokenizer(json, () => {
    loads++;
    throw new Error("not a tokenizer");
  }, join(dir, "cache"));
  assert.throws(() => t.encode("a"), /not a tokenizer/);
  assert.throws(() => t.encode("b"), /not a tokenizer/);
  assert.is(loads, 1);
});

test("two writers of one cache keep each other's texts", () => {
  const dir = mkdtempSync(join(tmpdir(), "token-cache-"));
  const cache = join(dir, "cache");
  const json = tokenizerFile(dir, "t.json", "{}");
  // two ranks open the (empty) cache, each tokenizes its own text, then both flush
  const rank0 = cachedTokenizer(json, counting(json).load, cache);
  const rank1 = cachedTokenizer(json, counting(json).load, cache);
  rank0.encode("zero");
  rank1.encode("one");
  rank0.flush?.();
  rank1.flush?.();
  const later = counting(json);
  const t = cachedTokenizer(json, later.load, cache);
  t.encode("zero");
  t.encode("one");
  assert.is(later.counts.loads, 0);
  assert.equal(readdirSync(cache).filter((f) => f.endsWith(".tmp")), []);
});

test.run();
