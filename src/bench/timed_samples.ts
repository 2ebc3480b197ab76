/**
 * How many timed samples a point gets: `repeats` (median-of-N) for every real-KV point
 * and every point whose total KV reaches the giant threshold, else one.
 *
 * ```ts
 * const policy = { repeats: 3, giantKvThreshold: 1_000_000 };
 * timedSamples(decodePoint(8, 2_000_000), "legacy", policy); // 3
 * ```
 */
import type { BenchPoint, KvSeedRegime } from "./artifact.ts";
import { totalKv } from "./point.ts";

/** The median-of-N policy. */
export interface MedianPolicy {
  /** Samples of a median-of-N point (>= 1). */
  readonly repeats: number;
  /** Total KV at or above which a point is median-of-N. */
  readonly giantKvThreshold: number;
}

/** The design's defaults: 3 samples, 1,000,000 KV tokens. */
export const DEFAULT_MEDIAN_POLICY: MedianPolicy = Object.freeze({
  repeats: 3,
  giantKvThreshold: 1_000_000,
});

/** True when the point is measured median-of-N. */
export function isMedianPoint(
  point: BenchPoint,
  regime: KvSeedRegime,
  policy: MedianPolicy,
): boolean {
  return regime === "real_kv" || regime === "real_prefix" ||
    totalKv(point) >= policy.giantKvThreshold;
}

/** Timed samples of the point: steady steps (decode) or shots (prefill). */
export function timedSamples(
  point: BenchPoint,
  regime: KvSeedRegime,
  policy: MedianPolicy,
): number {
  return isMedianPoint(point, regime, policy) ? policy.repeats : 1;
}
