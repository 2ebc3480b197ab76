/**
 * Grid axes: powers of two up to a limit plus the limit, and the design's
 * endpoint-keeping down-sampling `values[(s*(n-1) + (k-1)//2) // (k-1)]`.
 *
 * ```ts
 * powerAxis(48);                       // [1, 2, 4, 8, 16, 32, 48]
 * downsample([1, 2, 4, 8, 16, 32, 48], 3); // [1, 8, 48]
 * ```
 */

/** Powers of two from `from` (a power of two) up to `limit`, plus `limit` itself. */
export function powerAxis(limit: number, from = 1): number[] {
  const out: number[] = [];
  for (let v = from; v < limit; v *= 2) out.push(v);
  if (limit >= from) out.push(limit);
  return out;
}

/**
 * At most `k` of the sorted `values`, always keeping the first and the last: sample `s`
 * of `k` is `values[floor((s * (n - 1) + floor((k - 1) / 2)) / (k - 1))]` (rounded
 * positions, so the picks spread evenly). `k >= n` keeps everything; `k == 1` keeps the
 * last (the largest).
 */
export function downsample<T>(values: readonly T[], k: number): T[] {
  if (!Number.isSafeInteger(k) || k < 1) {
    throw new RangeError(`downsample: k must be >= 1, got ${k}`);
  }
  const n = values.length;
  if (n <= k) return [...values];
  if (k === 1) return [values[n - 1]];
  const out: T[] = [];
  for (let s = 0; s < k; s++) {
    const i = Math.floor((s * (n - 1) + Math.floor((k - 1) / 2)) / (k - 1));
    if (out.length === 0 || values[i] !== out[out.length - 1]) out.push(values[i]);
  }
  return out;
}
