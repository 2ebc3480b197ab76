/**
 * The checks rank 0 makes when every rank's report of a round is in: values that must
 * be equal on every rank (grid digest, point, scheduled shape, step seq), and the
 * iteration wall of a point (max over ranks, sample by sample). Inputs are indexed by
 * rank; a failed check throws a {@link DpError} listing every rank's value.
 */
import { DpError, type DpErrorCode } from "./dp_error.ts";
import type { ScheduledShape } from "./messages.ts";

/**
 * Requires every rank to report the same value (compared as canonical JSON).
 *
 * @example
 * ```ts
 * requireEqual(["ab12", "ab12"], "grid digests", "disagreement"); // "ab12"
 * requireEqual(["ab12", "cd34"], "grid digests", "disagreement");
 * // throws "grid digests differ across ranks: rank 0 "ab12", rank 1 "cd34""
 * ```
 */
export function requireEqual<T>(values: readonly T[], what: string, code: DpErrorCode): T {
  const keys = values.map(canonicalJson);
  const differing = keys.flatMap((k, rank) => k === keys[0] ? [] : [rank]);
  if (differing.length > 0) {
    const prefix = code === "lockstep" ? "ranks are not in lockstep: " : "";
    const list = keys.map((k, rank) => `rank ${rank} ${k}`).join(", ");
    throw new DpError(code, `${prefix}${what} differ across ranks: ${list}`, [0, ...differing]);
  }
  return values[0];
}

/** Requires every rank's scheduled-shape summary of a point to be equal. */
export function requireEqualShapes(
  shapes: readonly ScheduledShape[],
  benchmarkId: number,
): ScheduledShape {
  return requireEqual(shapes, `scheduled shapes of benchmark_id=${benchmarkId}`, "disagreement");
}

/**
 * The iteration walls of a point: for each sample, the max over ranks (the group's step
 * is as slow as its slowest rank). Every rank must report the same number of samples.
 *
 * @example
 * ```ts
 * iterationWalls([[0.010, 0.012], [0.011, 0.009]], 3); // [0.011, 0.012]
 * ```
 */
export function iterationWalls(
  walls: readonly (readonly number[])[],
  benchmarkId: number,
): number[] {
  requireEqual(
    walls.map((w) => w.length),
    `sample counts of benchmark_id=${benchmarkId}`,
    "disagreement",
  );
  return walls[0].map((_, i) => Math.max(...walls.map((w) => w[i])));
}

/** JSON with object keys sorted, so equal values compare equal whatever their key order. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(
    value,
    (_key, v) =>
      typeof v === "object" && v !== null && !Array.isArray(v)
        ? Object.fromEntries(
          Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]),
        )
        : v,
  );
}
