/**
 * A point's wall time from its samples: the one sample, or the upper median
 * `sorted(walls)[n // 2]` (for 3 samples, the middle one), naming the sample it chose.
 *
 * ```ts
 * estimateWall([0.012, 0.010, 0.011]); // { method: "upper_median", median_of: 3, index: 2, wall: 0.011 }
 * ```
 */

/** Which sample stands for the point. */
export interface WallEstimate {
  /** `single_sample` or `upper_median`. */
  readonly method: "single_sample" | "upper_median";
  /** Samples it is over. */
  readonly median_of: number;
  /** Index of the chosen sample. */
  readonly index: number;
  /** Its wall, s. */
  readonly wall: number;
}

/** The estimate over `walls` (at least one). Ties keep sample order. */
export function estimateWall(walls: readonly number[]): WallEstimate {
  if (walls.length === 0) throw new RangeError("estimateWall: no samples");
  if (walls.length === 1) {
    return { method: "single_sample", median_of: 1, index: 0, wall: walls[0] };
  }
  const order = walls.map((_, i) => i).sort((a, b) => walls[a] - walls[b] || a - b);
  const index = order[Math.floor(walls.length / 2)];
  return { method: "upper_median", median_of: walls.length, index, wall: walls[index] };
}
