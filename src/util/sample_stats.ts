/**
 * Summaries of timing samples the perf tasks print and write.
 *
 * ```ts
 * upperMedian([3, 1, 2, 4]); // 3 (the upper of the middle two)
 * round3(1.23456);           // 1.235
 * ```
 */

/** The upper median: the middle value, or the upper of the middle two (an odd count's median). */
export function upperMedian(xs: readonly number[]): number {
  if (xs.length === 0) throw new Error("median of nothing");
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

/** `x` to three decimals (figures written to JSON). */
export function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
