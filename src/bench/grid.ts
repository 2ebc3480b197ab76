/**
 * The generated grid of the design, planned against the engine's capacity.
 *
 * Decode: a batch axis of powers of two up to
 * `min(max_num_seqs, max_batched_tokens, usable_blocks / blocks(smallest request))`
 * plus that limit; per batch B a KV ladder `{B, powers of two, max feasible}`,
 * normalised to the steady coordinate `sum(max(1, ctx - 1)) + B`, deduplicated and
 * down-sampled. Prefill: a token axis of powers of two up to `max_batched_tokens` plus
 * the limit; per T the smallest legal power-of-two batch sizes (B <= T); per (B, T) a
 * KV-read axis in hash blocks `{0, B, powers of two >= B, max}` (only with prefix
 * caching). Points a request or the pool cannot hold are dropped and counted. Points
 * come out in execution order (decode batch desc, KV desc; prefill largest first).
 *
 * ```ts
 * const { points, infeasible } = generateDecodeGrid(capacity, FULL_GRID, DEFAULT_MEDIAN_POLICY);
 * ```
 */
import type {
  BenchCapacity,
  DecodeKvSeedRegime,
  DecodePoint,
  GridLimits,
  PrefillPoint,
} from "./artifact.ts";
import { blocksFor } from "./capacity.ts";
import { downsample, powerAxis } from "./downsample.ts";
import { isFeasible } from "./feasibility.ts";
import { steadyCoordinate } from "./partition.ts";
import { decodePoint, orderDecode, orderPrefill, prefillPoint } from "./point.ts";
import { type MedianPolicy, timedSamples } from "./timed_samples.ts";

/** The design's sample limits. */
export const FULL_GRID: GridLimits = Object.freeze({
  decode_batch_samples: 128,
  decode_kv_samples: 128,
  prefill_token_samples: 64,
  prefill_batch_sizes: 3,
  prefill_kv_read_samples: 16,
});

/** A grid small enough for the software driver: every axis keeps its two endpoints. */
export const SMOKE_GRID: GridLimits = Object.freeze({
  decode_batch_samples: 2,
  decode_kv_samples: 2,
  prefill_token_samples: 2,
  prefill_batch_sizes: 1,
  prefill_kv_read_samples: 2,
});

/**
 * A grid for minutes, not hours, on a GPU: eight samples on the batch, KV and token axes
 * (endpoints kept), two prefill batch sizes, four prefix depths: enough for the predictor's
 * fits and its grid interpolation over the same domain.
 */
export const MEDIUM_GRID: GridLimits = Object.freeze({
  decode_batch_samples: 8,
  decode_kv_samples: 8,
  prefill_token_samples: 8,
  prefill_batch_sizes: 2,
  prefill_kv_read_samples: 4,
});

/** Named presets of `--grid`. */
export const GRID_PRESETS: Readonly<Record<string, GridLimits>> = Object.freeze({
  full: FULL_GRID,
  medium: MEDIUM_GRID,
  smoke: SMOKE_GRID,
});

/** A generated grid: its points in execution order, and how many were dropped. */
export interface GeneratedGrid<P> {
  /** Feasible points, in execution order. */
  readonly points: P[];
  /** Candidates dropped because the engine cannot hold them. */
  readonly infeasible: number;
}

/** The largest v in [lo, hi] with ok(v), assuming ok is monotone (true then false); lo must be ok. */
function largest(lo: number, hi: number, ok: (v: number) => boolean): number {
  while (lo < hi) {
    const mid = lo + Math.ceil((hi - lo) / 2);
    if (ok(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * The decode grid (batch desc, KV desc). With kvwarm on, points are checked for the
 * steady steps of a `real_kv` point (median-of-N), so the deepest point of each ladder
 * can read real KV.
 */
export function generateDecodeGrid(
  capacity: BenchCapacity,
  limits: GridLimits,
  policy: MedianPolicy,
  regime: DecodeKvSeedRegime = "legacy",
): GeneratedGrid<DecodePoint> {
  const feasible = (b: number, k: number) => {
    const p = decodePoint(b, k);
    return isFeasible(p, capacity, timedSamples(p, regime, policy));
  };
  const smallest = blocksFor(2 + 1, capacity.block_size); // ctx 2, one steady step
  const bmax = Math.min(
    capacity.max_num_seqs,
    capacity.max_batched_tokens,
    Math.floor(capacity.usable_blocks / smallest),
  );
  const points: DecodePoint[] = [];
  let infeasible = 0;
  if (bmax < 1) return { points, infeasible };
  for (const b of downsample(powerAxis(bmax), limits.decode_batch_samples)) {
    if (!feasible(b, b)) {
      infeasible++;
      continue;
    }
    const kmax = largest(b, b * capacity.max_model_len, (k) => feasible(b, k));
    const ladder = new Set<number>();
    for (const k of [b, ...powerAxis(kmax).filter((k) => k > b)]) {
      const steady = steadyCoordinate(k, b);
      if (feasible(b, steady)) ladder.add(steady);
      else infeasible++;
    }
    const ks = [...ladder].sort((x, y) => x - y);
    for (const k of downsample(ks, limits.decode_kv_samples)) points.push(decodePoint(b, k));
  }
  return { points: orderDecode(points), infeasible };
}

/** The prefill grid (largest first). */
export function generatePrefillGrid(
  capacity: BenchCapacity,
  limits: GridLimits,
  policy: MedianPolicy,
): GeneratedGrid<PrefillPoint> {
  const bs = capacity.block_size;
  const feasible = (b: number, t: number, blocks: number) => {
    const p = prefillPoint(b, t, blocks * bs);
    return isFeasible(p, capacity, timedSamples(p, "fake_prefix", policy));
  };
  const points: PrefillPoint[] = [];
  let infeasible = 0;
  for (
    const t of downsample(powerAxis(capacity.max_batched_tokens), limits.prefill_token_samples)
  ) {
    const batches = powerAxis(Math.min(t, capacity.max_num_seqs))
      .filter((b) => (b & (b - 1)) === 0)
      .slice(0, limits.prefill_batch_sizes);
    for (const b of batches) {
      if (!feasible(b, t, 0)) {
        infeasible++;
        continue;
      }
      const blocks = [0];
      if (capacity.prefix_caching && feasible(b, t, b)) {
        const maxBlocks = largest(
          b,
          Math.ceil(capacity.max_model_len / bs) * b,
          (n) => feasible(b, t, n),
        );
        blocks.push(
          ...powerAxis(maxBlocks, 1).filter((n) => n >= b),
        );
      }
      const axis = [...new Set(blocks)].sort((x, y) => x - y);
      for (const n of downsample(axis, limits.prefill_kv_read_samples)) {
        points.push(prefillPoint(b, t, n * bs));
      }
    }
  }
  return { points: orderPrefill(points), infeasible };
}
