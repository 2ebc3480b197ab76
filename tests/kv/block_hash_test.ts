import { test } from "uvu";
import * as assert from "uvu/assert";
import { createHash } from "node:crypto";
import {
  blockExtraKeys,
  type BlockHash,
  extendBlockHashes,
  hashBlockTokens,
} from "../../src/kv/block_hash.ts";

/** The canonical encoding written out byte by byte, independently of the module. */
function expectedHash(parent: string | null, tokens: number[], keys: string[]): string {
  const bytes: number[] = [...new TextEncoder().encode("webfpm.kv_block.v1\0")];
  const u32 = (v: number) => bytes.push(v & 255, (v >>> 8) & 255, (v >>> 16) & 255, v >>> 24);
  if (parent === null) bytes.push(0);
  else {
    bytes.push(1);
    for (let i = 0; i < 64; i += 2) bytes.push(parseInt(parent.slice(i, i + 2), 16));
  }
  u32(tokens.length);
  for (const t of tokens) u32(t);
  u32(keys.length);
  for (const k of keys) {
    const kb = new TextEncoder().encode(k);
    u32(kb.length);
    bytes.push(...kb);
  }
  return createHash("sha256").update(new Uint8Array(bytes)).digest("hex");
}

test("a block hash is sha256 of (parent, tokens, extra keys) in the canonical encoding", () => {
  const h0 = hashBlockTokens(null, [5, 6, 7, 8], 0, 4, ["cache_salt:a"]);
  assert.is(h0, expectedHash(null, [5, 6, 7, 8], ["cache_salt:a"]));
  const h1 = hashBlockTokens(h0, [5, 6, 7, 8, 70000, 1, 2, 3], 4, 8, []);
  assert.is(h1, expectedHash(h0, [70000, 1, 2, 3], []));
  assert.match(h1, /^[0-9a-f]{64}$/);
});

test("cache_salt enters block 0's extra keys only", () => {
  assert.equal(blockExtraKeys(0, "s"), ["cache_salt:s"]);
  assert.equal(blockExtraKeys(1, "s"), []);
  assert.equal(blockExtraKeys(0, null), []);
});

test("one salt changes every block hash of a request, through the parent chain", () => {
  const tokens = Array.from({ length: 12 }, (_, i) => i + 1);
  const plain: BlockHash[] = [], salted: BlockHash[] = [], other: BlockHash[] = [];
  extendBlockHashes(plain, tokens, 4, null);
  extendBlockHashes(salted, tokens, 4, "a");
  extendBlockHashes(other, tokens, 4, "b");
  assert.is(plain.length, 3);
  for (let i = 0; i < 3; i++) {
    assert.is.not(plain[i], salted[i]);
    assert.is.not(salted[i], other[i]);
  }
});

test("the same tokens and salt give the same hashes; a longer sequence extends them", () => {
  const long = Array.from({ length: 10 }, (_, i) => 3 * i);
  const a: BlockHash[] = [], b: BlockHash[] = [];
  extendBlockHashes(a, long.slice(0, 7), 4, "x"); // one full block
  extendBlockHashes(b, long, 4, "x"); // two full blocks
  assert.is(a.length, 1);
  assert.is(b.length, 2);
  assert.is(a[0], b[0]);
  extendBlockHashes(a, long, 4, "x");
  assert.equal(a, b);
});

test("a block with the same tokens under another parent hashes differently", () => {
  const p1 = hashBlockTokens(null, [1, 1], 0, 2, []);
  const p2 = hashBlockTokens(null, [2, 2], 0, 2, []);
  assert.is.not(hashBlockTokens(p1, [9, 9], 0, 2, []), hashBlockTokens(p2, [9, 9], 0, 2, []));
});

test("bad input is named: a negative token, an empty range, a malformed parent", () => {
  assert.throws(() => hashBlockTokens(null, [1, -3], 0, 2, []), /token -3 at position 1/);
  assert.throws(() => hashBlockTokens(null, [1], 0, 2, []), /empty or past/);
  assert.throws(() => hashBlockTokens("abc", [1], 0, 1, []), /not sha256 hex/);
});

test.run();
