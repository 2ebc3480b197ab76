/**
 * Block hashes of the prefix cache: sha256 over a canonical encoding of
 * (parent hash, token ids, extra keys). Every hash chains its parent, so a block hash
 * names the whole prefix up to and including its block; `cache_salt` enters block 0's
 * extra keys only, and that one salt isolates every block of a request.
 *
 * Canonical encoding (all integers unsigned 32-bit little-endian):
 * ```
 * "webfpm.kv_block.v1\0"
 * 0x00                          (no parent: block 0)  | 0x01 + 32 parent hash bytes
 * u32 numTokens, u32 token...   (token ids of the block, in order)
 * u32 numExtraKeys, then per key: u32 byteLength + UTF-8 bytes
 * ```
 *
 * ```ts
 * const keys = blockExtraKeys(0, "salt-a");          // ["cache_salt:salt-a"]
 * const h0 = hashBlockTokens(null, [5, 6, 7, 8], 0, 4, keys);
 * const h1 = hashBlockTokens(h0, [5, 6, 7, 8, 9, 10, 11, 12], 4, 8, []);
 * ```
 */
import { createHash } from "node:crypto";

/** A block hash: 64 lowercase hex digits of a sha256 digest. */
export type BlockHash = string;

const TAG = new TextEncoder().encode("webfpm.kv_block.v1\0");
const encoder = new TextEncoder();
let scratch = new Uint8Array(1024);

/** The extra keys that enter the hash of block `blockIndex` of a request. */
export function blockExtraKeys(blockIndex: number, cacheSalt: string | null): readonly string[] {
  return blockIndex === 0 && cacheSalt !== null ? [`cache_salt:${cacheSalt}`] : [];
}

function hexValue(code: number): number {
  if (code >= 48 && code <= 57) return code - 48;
  if (code >= 97 && code <= 102) return code - 87;
  return -1;
}

/**
 * Hashes the block holding `tokens[start, end)` whose parent block hashed to `parent`
 * (null for block 0).
 */
export function hashBlockTokens(
  parent: BlockHash | null,
  tokens: ArrayLike<number>,
  start: number,
  end: number,
  extraKeys: readonly string[],
): BlockHash {
  const n = end - start;
  if (n <= 0 || end > tokens.length) {
    throw new Error(`block token range [${start}, ${end}) is empty or past ${tokens.length}`);
  }
  const keys = extraKeys.map((k) => encoder.encode(k));
  let size = TAG.length + 1 + (parent === null ? 0 : 32) + 4 + 4 * n + 4;
  for (const k of keys) size += 4 + k.length;
  if (scratch.length < size) scratch = new Uint8Array(Math.max(size, 2 * scratch.length));
  const buf = scratch;
  const view = new DataView(buf.buffer);
  buf.set(TAG, 0);
  let o = TAG.length;
  if (parent === null) buf[o++] = 0;
  else {
    buf[o++] = 1;
    if (parent.length !== 64) throw new Error(`parent hash "${parent}" is not sha256 hex`);
    for (let i = 0; i < 64; i += 2) {
      const hi = hexValue(parent.charCodeAt(i)), lo = hexValue(parent.charCodeAt(i + 1));
      if (hi < 0 || lo < 0) throw new Error(`parent hash "${parent}" is not sha256 hex`);
      buf[o++] = (hi << 4) | lo;
    }
  }
  view.setUint32(o, n, true);
  o += 4;
  for (let i = 0; i < n; i++, o += 4) {
    const t = tokens[start + i];
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new Error(`token ${t} at position ${start + i} is not a token id`);
    }
    view.setUint32(o, t, true);
  }
  view.setUint32(o, keys.length, true);
  o += 4;
  for (const k of keys) {
    view.setUint32(o, k.length, true);
    buf.set(k, o + 4);
    o += 4 + k.length;
  }
  return createHash("sha256").update(buf.subarray(0, o)).digest("hex");
}

/**
 * Extends `hashes` (the block hashes of a request, block 0 first) to cover every full
 * block of `tokens`. Tokens whose values are not known yet must not be in `tokens`.
 */
export function extendBlockHashes(
  hashes: BlockHash[],
  tokens: ArrayLike<number>,
  blockSize: number,
  cacheSalt: string | null,
): void {
  const numFull = Math.floor(tokens.length / blockSize);
  for (let i = hashes.length; i < numFull; i++) {
    hashes.push(
      hashBlockTokens(
        i === 0 ? null : hashes[i - 1],
        tokens,
        i * blockSize,
        (i + 1) * blockSize,
        blockExtraKeys(i, cacheSalt),
      ),
    );
  }
}
