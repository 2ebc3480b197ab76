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

/** The extra keys that enter the hash of block `blockIndex` of a request. */
export function blockExtraKeys(blockIndex: number, cacheSalt: string | null): readonly string[] {
  return blockIndex === 0 && cacheSalt !== null ? [`cache_salt:${cacheSalt}`] : [];
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
  const body = new DataView(new ArrayBuffer(4 + 4 * n + 4));
  body.setUint32(0, n, true);
  for (let i = 0; i < n; i++) {
    const t = tokens[start + i];
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new Error(`token ${t} at position ${start + i} is not a token id`);
    }
    body.setUint32(4 + 4 * i, t, true);
  }
  body.setUint32(4 + 4 * n, extraKeys.length, true);
  const h = createHash("sha256").update(TAG);
  if (parent === null) h.update(new Uint8Array([0]));
  else {
    if (!/^[0-9a-f]{64}$/.test(parent)) {
      throw new Error(`parent hash "${parent}" is not sha256 hex`);
    }
    h.update(new Uint8Array([1])).update(parent, "hex");
  }
  h.update(new Uint8Array(body.buffer));
  for (const key of extraKeys) {
    const bytes = encoder.encode(key);
    const len = new DataView(new ArrayBuffer(4));
    len.setUint32(0, bytes.length, true);
    h.update(new Uint8Array(len.buffer)).update(bytes);
  }
  return h.digest("hex");
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
