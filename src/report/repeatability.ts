/**
 * Repeatability of two benchmark runs of the same points: per point (by point key, rank 0's
 * row, or each rank's where both runs have it), the relative difference of the wall-time
 * estimates and of the GPU times, and how many points fall within a bound.
 *
 * ```ts
 * const r = compareRuns(readArtifact("a.json"), readArtifact("b.json"), 0.02);
 * r.wallWithin; // points whose wall estimates differ by at most 2%
 * ```
 */
import type { BenchArtifact } from "../bench/artifact.ts";

/** One point measured in both runs. */
export interface PointComparison {
  readonly key: string;
  readonly rank: number;
  /** Estimate method and sample count of each run (e.g. "upper_median of 3"). */
  readonly method: string;
  readonly wallA: number;
  readonly wallB: number;
  /** (B - A) / A. */
  readonly wallDiff: number;
  readonly gpuA: number | null;
  readonly gpuB: number | null;
  readonly gpuDiff: number | null;
}

export interface RunComparison {
  readonly points: readonly PointComparison[];
  /** The bound, as a fraction (0.02 = 2%). */
  readonly bound: number;
  readonly wallWithin: number;
  readonly gpuWithin: number;
  /** Points with GPU times in both runs. */
  readonly gpuCompared: number;
  /** Keys measured in one run only. */
  readonly onlyA: readonly string[];
  readonly onlyB: readonly string[];
}

function rows(a: BenchArtifact) {
  const out = new Map<string, { wall: number; gpu: number | null; method: string }>();
  for (const r of a.results) {
    for (const f of r.fpms) {
      const e = f.benchmark_measurement.estimate;
      out.set(`${r.point_key}\u0000${f.rank}`, {
        wall: f.wall_time,
        gpu: f.gpu_time,
        method: `${e.method} of ${e.median_of}`,
      });
    }
  }
  return out;
}

/** Compares run B against run A, point by point; `bound` is a fraction (0.02 = 2%). */
export function compareRuns(a: BenchArtifact, b: BenchArtifact, bound: number): RunComparison {
  if (!(bound >= 0)) throw new RangeError(`bound ${bound} must be a fraction >= 0`);
  const ra = rows(a), rb = rows(b);
  const points: PointComparison[] = [];
  for (const [id, x] of ra) {
    const y = rb.get(id);
    if (!y) continue;
    const [key, rank] = id.split("\u0000");
    const gpuDiff = x.gpu !== null && y.gpu !== null && x.gpu > 0 ? (y.gpu - x.gpu) / x.gpu : null;
    points.push({
      key,
      rank: Number(rank),
      method: x.method === y.method ? x.method : `${x.method} / ${y.method}`,
      wallA: x.wall,
      wallB: y.wall,
      wallDiff: (y.wall - x.wall) / x.wall,
      gpuA: x.gpu,
      gpuB: y.gpu,
      gpuDiff,
    });
  }
  const keyOf = (id: string) => id.split("\u0000")[0];
  return {
    points,
    bound,
    wallWithin: points.filter((p) => Math.abs(p.wallDiff) <= bound).length,
    gpuWithin: points.filter((p) => p.gpuDiff !== null && Math.abs(p.gpuDiff) <= bound).length,
    gpuCompared: points.filter((p) => p.gpuDiff !== null).length,
    onlyA: [...new Set([...ra.keys()].filter((k) => !rb.has(k)).map(keyOf))],
    onlyB: [...new Set([...rb.keys()].filter((k) => !ra.has(k)).map(keyOf))],
  };
}

/** Upper median and largest absolute value of `xs` (0, 0 for none). */
export function absSpread(xs: readonly number[]): { median: number; max: number } {
  if (xs.length === 0) return { median: 0, max: 0 };
  const s = xs.map(Math.abs).sort((p, q) => p - q);
  return { median: s[Math.floor(s.length / 2)], max: s[s.length - 1] };
}
