/**
 * Salted prompts: a unique cache_salt per request, token content from a separate content
 * salt seeded `content-v1:{seed}:dp{rank}:{salt}`, uniform in [1, vocab_size), with the
 * prefix property; zeros when the vocabulary is too small (flagged); real-text windows
 * that wrap; prompt identity as sha256 of uint32-LE ids.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { createHash } from "node:crypto";
import { promptDigest } from "../../src/bench/prompt_digest.ts";
import { randomContent, textContent, zerosContent } from "../../src/bench/prompt_content.ts";
import { contentSalt, contentSeedString, SaltScheme } from "../../src/bench/salts.ts";
import { Rng } from "../../src/util/rng.ts";

test("cache salts are unique per run, rank, point, role, shot and slot", () => {
  const a = new SaltScheme("run-a", 0),
    b = new SaltScheme("run-b", 0),
    r1 = new SaltScheme("run-a", 1);
  const salts = new Set<string>();
  for (const s of [a, b, r1]) {
    for (const id of [1, 2, 12]) {
      for (const role of ["measure", "replica", "warmup"] as const) {
        for (const shot of [0, 1, 2]) {
          for (const slot of [0, 1, 21]) salts.add(s.cacheSalt(id, role, shot, slot));
        }
      }
    }
  }
  assert.is(salts.size, 3 * 3 * 3 * 3 * 3);
  // "1:measure0:21" vs "12:measure0:1" must not collide by concatenation
  assert.is.not(a.cacheSalt(1, "measure", 0, 21), a.cacheSalt(12, "measure", 0, 1));
});

test("the content seed is content-v1:{content_seed}:dp{rank}:{salt}", () => {
  assert.is(contentSeedString("7", 3, "decode:B8:K64:2"), "content-v1:7:dp3:decode:B8:K64:2");
  assert.is(contentSalt("decode:B8:K64", 2), "decode:B8:K64:2");
});

test("random content: uniform in [1, vocab), drawn from the seeded generator, with the prefix property", () => {
  const c = randomContent(1000, "0", 0);
  assert.is(c.mode, "random");
  assert.is(c.zerosFallback, false);
  const long = c.tokens("s", 4096);
  const rng = Rng.fromSeed("content-v1:0:dp0:s");
  assert.equal(Array.from(long.subarray(0, 5)), Array.from({ length: 5 }, () => rng.int(1, 1000)));
  assert.ok(long.every((t) => t >= 1 && t < 1000));
  assert.ok(new Set(long).size > 900, "spread over the vocabulary");
  for (const n of [1, 17, 100, 4095]) {
    assert.equal(Array.from(c.tokens("s", n)), Array.from(long.subarray(0, n)), `prefix of ${n}`);
  }
  assert.not.equal(Array.from(c.tokens("t", 32)), Array.from(long.subarray(0, 32)), "salts differ");
  assert.not.equal(
    Array.from(randomContent(1000, "0", 1).tokens("s", 32)),
    Array.from(long.subarray(0, 32)),
    "ranks differ",
  );
  assert.not.equal(
    Array.from(randomContent(1000, "1", 0).tokens("s", 32)),
    Array.from(long.subarray(0, 32)),
    "content seeds differ",
  );
});

test("a vocabulary of one token or less falls back to zeros, and says so", () => {
  for (const v of [1, 0]) {
    const c = randomContent(v, "0", 0);
    assert.is(c.mode, "zeros");
    assert.is(c.zerosFallback, true);
    assert.match(c.fallbackReason!, /vocab_size .* <= 1/);
    assert.equal(Array.from(c.tokens("s", 4)), [0, 0, 0, 0]);
  }
  const z = zerosContent();
  assert.is(z.zerosFallback, false, "zeros asked for is not a fallback");
});

test("text content: windows of the pool from a seeded offset, wrapping, with the prefix property", () => {
  const pool = Int32Array.from({ length: 50 }, (_, i) => 100 + i);
  const c = textContent(pool, "0", 0);
  assert.is(c.mode, "text");
  const start = Rng.fromSeed("content-v1:0:dp0:w").int(0, 50);
  const w = c.tokens("w", 120);
  for (let i = 0; i < 120; i++) assert.is(w[i], 100 + ((start + i) % 50));
  assert.equal(Array.from(c.tokens("w", 7)), Array.from(w.subarray(0, 7)));
  assert.throws(() => textContent(new Int32Array(0), "0", 0), /pool is empty/);
});

test("promptDigest is sha256 of the ids as uint32 little-endian", () => {
  const bytes = Buffer.from([1, 0, 0, 0, 0x10, 0x27, 0, 0, 0xff, 0xff, 0xff, 0xff]);
  assert.is(promptDigest([1, 10000, -1]), createHash("sha256").update(bytes).digest("hex"));
  assert.is.not(promptDigest([1, 2]), promptDigest([2, 1]));
});

test.run();
