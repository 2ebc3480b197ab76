/**
 * The numbered grid: decode points batch desc, KV desc (then as the decode seeder
 * reorders them: kvwarm puts warmed points first), then prefill points
 * largest first; each gets its benchmark_id (1..N in execution order), its planned
 * kv_seed_regime and its number of timed samples, all fixed before anything runs. The
 * grid digest (sha256 of that list) is what attention-DP ranks agree on.
 *
 * ```ts
 * const planned = planPoints(decode, prefill, decodeSeeder, prefixSeeder, policy);
 * gridDigest(planned); // "9f2c..."
 * ```
 */
import { createHash } from "node:crypto";
import type { BenchPoint, DecodePoint, KvSeedRegime, PrefillPoint } from "./artifact.ts";
import type { DecodeSeeder } from "./decode_seeder.ts";
import { orderDecode, orderPrefill, pointKey } from "./point.ts";
import type { PrefixSeeder } from "./prefix_seeder.ts";
import { type MedianPolicy, timedSamples } from "./timed_samples.ts";

/** A point as it will run. */
export interface PlannedPoint {
  /** 1..N in execution order. */
  readonly benchmark_id: number;
  /** The point. */
  readonly point: BenchPoint;
  /** Its key. */
  readonly key: string;
  /** Its planned regime. */
  readonly regime: KvSeedRegime;
  /** Timed samples: steady steps (decode) or shots (prefill). */
  readonly samples: number;
}

/** Orders, numbers and annotates the points (decode first, then prefill). */
export function planPoints(
  decode: readonly DecodePoint[],
  prefill: readonly PrefillPoint[],
  decodeSeeder: DecodeSeeder,
  prefixSeeder: PrefixSeeder,
  policy: MedianPolicy,
): PlannedPoint[] {
  const ordered: [BenchPoint, KvSeedRegime][] = [
    ...decodeSeeder.order(orderDecode(decode)).map((p) =>
      [p, decodeSeeder.regime(p)] as [BenchPoint, KvSeedRegime]
    ),
    ...orderPrefill(prefill).map((p) => [p, prefixSeeder.regime(p)] as [BenchPoint, KvSeedRegime]),
  ];
  return ordered.map(([point, regime], i) => ({
    benchmark_id: i + 1,
    point,
    key: pointKey(point),
    regime,
    samples: timedSamples(point, regime, policy),
  }));
}

/** sha256 hex of the numbered list (id, key, regime, samples). */
export function gridDigest(planned: readonly PlannedPoint[]): string {
  const rows = planned.map((p) => [p.benchmark_id, p.key, p.regime, p.samples]);
  return createHash("sha256").update(JSON.stringify(rows)).digest("hex");
}
