/**
 * How a point's totals are split over its requests: a balanced partition (the
 * remainder goes to the first requests), every request at least one; prefill KV reads
 * in whole hash blocks; and the decode plan that admits each request at
 * `max(1, ctx - 1)` so its steady step reads `max(2, ctx)` KV tokens.
 *
 * ```
 * balancedPartition(10, 4)          -> [3, 3, 2, 2]
 * prefixPartition(5 * 16, 2, 16)    -> [48, 32]      (blocks 3 + 2)
 * decodePlan(5, 3)                  -> ctx [2, 2, 1] -> computed [1, 1, 1], steady reads [2, 2, 2]
 * ```
 */

/** `total` split into `n` parts as equal as possible, larger parts first. */
export function balancedPartition(total: number, n: number): number[] {
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new RangeError(`partition: n must be >= 1, got ${n}`);
  }
  if (!Number.isSafeInteger(total) || total < 0) {
    throw new RangeError(`partition: total must be a non-negative integer, got ${total}`);
  }
  const base = Math.floor(total / n);
  const extra = total % n;
  return Array.from({ length: n }, (_, i) => base + (i < extra ? 1 : 0));
}

/**
 * Prefix tokens per request for a prefill point reading `totalKv` tokens: whole hash
 * blocks, balanced, at least one block each when non-zero. Throws when `totalKv` is not
 * a whole number of blocks or gives a request no block.
 */
export function prefixPartition(totalKv: number, batch: number, blockSize: number): number[] {
  if (totalKv === 0) return new Array(batch).fill(0);
  if (totalKv % blockSize !== 0) {
    throw new RangeError(
      `${totalKv} KV tokens are not a whole number of ${blockSize}-token blocks`,
    );
  }
  const blocks = totalKv / blockSize;
  if (blocks < batch) {
    throw new RangeError(`${blocks} KV blocks cannot give each of ${batch} requests one block`);
  }
  return balancedPartition(blocks, batch).map((b) => b * blockSize);
}

/** One request of a decode point. */
export interface DecodeSlot {
  /** The request's share of the point's total (its context). */
  readonly ctx: number;
  /** Tokens counted as computed at admission: `max(1, ctx - 1)`. */
  readonly computed: number;
  /** Prompt length: `computed + 1`; the admission step computes its last token. */
  readonly promptTokens: number;
  /** KV tokens its first steady step reads: `max(2, ctx)`. */
  readonly steadyKv: number;
}

/** The requests of a decode point `(batch, totalKv)`. */
export function decodePlan(totalKv: number, batch: number): DecodeSlot[] {
  return balancedPartition(totalKv, batch).map((ctx) => {
    const computed = Math.max(1, ctx - 1);
    return { ctx, computed, promptTokens: computed + 1, steadyKv: computed + 1 };
  });
}

/**
 * The coordinate a decode point is measured at: `sum(max(1, ctx - 1)) + B` over the
 * balanced partition. Equal to `totalKv` unless some request's share is 1.
 */
export function steadyCoordinate(totalKv: number, batch: number): number {
  return decodePlan(totalKv, batch).reduce((s, r) => s + r.steadyKv, 0);
}
