/**
 * The merged view of a group's run: one artifact (schema_version 2) whose results hold
 * every rank's FPM row of each point (`fpms`, by rank), whose `iteration_groups` are the
 * group walls (per sample the slowest rank's), and whose `attention_dp.merged_ranks` says
 * how each rank ended. A point is in the merged view when every rank measured it (or
 * every rank skipped it); the view stops at the first point some rank lacks. The status
 * is the worst over ranks (a missing artifact counts as failed), and the error the root
 * cause's: the first failed rank whose error is its own, not one forwarded by the group.
 *
 * ```ts
 * const merged = mergeRankArtifacts([rank0, rank1]); // index = rank; null = no artifact
 * writeJsonAtomic(mergedOutPath(out), merged);
 * ```
 */
import { existsSync, readFileSync } from "node:fs";
import type {
  BenchArtifact,
  BenchResult,
  Coverage,
  DpRankSummary,
  DpRoundStats,
  DpStepRound,
  IterationGroup,
  PointKind,
  RunError,
  SkippedPoint,
} from "../artifact.ts";
import { checkArtifact } from "../artifact_check.ts";
import { rankOutPath } from "./rank_out_path.ts";

/** The group's artifacts cannot be merged (different grids or runs, none at all). */
export class MergeError extends Error {
  /** `message` names the ranks and fields that disagree. */
  constructor(message: string) {
    super(message);
    this.name = "MergeError";
  }
}

/** Merges a group's artifacts (index = rank; null = that rank left none). */
export function mergeRankArtifacts(artifacts: readonly (BenchArtifact | null)[]): BenchArtifact {
  const present = artifacts.flatMap((a, rank) => (a === null ? [] : [{ rank, a }]));
  if (present.length === 0) throw new MergeError("no rank left an artifact");
  const size = artifacts.length;
  for (const { rank, a } of present) {
    if (a.rank !== rank) {
      throw new MergeError(`the artifact given as rank ${rank} is rank ${a.rank}'s`);
    }
    if (a.dp_size !== size) {
      throw new MergeError(
        `rank ${rank}'s artifact says dp_size ${a.dp_size}, the group has ${size}`,
      );
    }
  }
  const digests = new Set(present.map(({ a }) => a.grid_digest).filter((d) => d !== null));
  if (digests.size > 1) {
    throw new MergeError(
      "the ranks planned different grids: " +
        present.map(({ rank, a }) => `rank ${rank} ${a.grid_digest}`).join(", "),
    );
  }
  const base = present[0].a;
  const byRank = present.map(({ a }) => ({
    results: new Map(a.results.map((r) => [r.benchmark_id, r])),
    skipped: new Map(a.skipped_points.map((s) => [s.benchmark_id, s])),
    groups: new Map(a.iteration_groups.map((g) => [g.benchmark_id, g])),
  }));
  const everyRank = present.length === size;
  const results: BenchResult[] = [];
  const groups: IterationGroup[] = [];
  const skipped: SkippedPoint[] = [];
  for (let id = 1; everyRank; id++) {
    const rows = byRank.map((m) => m.results.get(id));
    const skips = byRank.map((m) => m.skipped.get(id));
    if (rows.every((r) => r !== undefined)) {
      const keys = new Set(rows.map((r) => r!.point_key));
      if (keys.size > 1) {
        throw new MergeError(`benchmark_id=${id} is ${[...keys].join(" / ")} on different ranks`);
      }
      results.push({ ...rows[0]!, fpms: rows.flatMap((r) => r!.fpms) });
      const group = byRank.map((m) => m.groups.get(id)).find((g) => g !== undefined);
      if (group) groups.push(group);
    } else if (skips.every((s) => s !== undefined)) {
      skipped.push(skips[0]!);
    } else break;
  }
  const summaries: DpRankSummary[] = artifacts.map((a, rank) =>
    a === null
      ? {
        rank,
        status: "failed",
        stop_reason: "error",
        points_measured: 0,
        error: "no artifact",
        step_round: null,
        idle_barrier: null,
      }
      : {
        rank,
        status: a.status,
        stop_reason: a.stop_reason,
        points_measured: a.results.length,
        error: a.error?.message ?? null,
        step_round: a.attention_dp?.step_round ?? null,
        idle_barrier: a.attention_dp?.idle_barrier ?? null,
      }
  );
  const failed = summaries.find((s) => s.status === "failed");
  const partial = summaries.find((s) => s.status === "partial");
  const status = failed ? "failed" : partial ? "partial" : "complete";
  const stopReason = failed
    ? (artifacts[failed.rank]?.stop_reason ?? "error")
    : partial
    ? artifacts[partial.rank]!.stop_reason
    : "complete";
  // The root cause: a failed rank's own error before one forwarded from another rank.
  const failedRanks = artifacts.map((a, rank) => ({ a, rank })).filter(({ a }) =>
    a === null || (a.status === "failed" && a.error !== null)
  );
  const forwarded = /^(rank \d+ failed: |rank 0 stopped the group: )/;
  const firstError = failedRanks.find(({ a }) => a !== null && !forwarded.test(a.error!.message)) ??
    failedRanks[0];
  const interrupt = present.find(({ a }) => a.error?.kind === "interrupted");
  const error: RunError | null = firstError
    ? {
      kind: firstError.a?.error?.kind ?? "runtime",
      message: `rank ${firstError.rank}: ${firstError.a?.error?.message ?? "left no artifact"}`,
      benchmark_id: firstError.a?.error?.benchmark_id ?? null,
      stack: firstError.a?.error?.stack ?? null,
    }
    : interrupt
    ? { ...interrupt.a.error!, message: `rank ${interrupt.rank}: ${interrupt.a.error!.message}` }
    : null;
  const measured = groups.reduce((s, g) => s + g.iteration_walls.reduce((x, w) => x + w, 0), 0);
  const elapsed = Math.max(...present.map(({ a }) => a.timing.elapsed));
  return {
    ...base,
    status,
    valid: status !== "failed",
    usable: status === "complete" && skipped.length === 0,
    stop_reason: stopReason,
    timing: {
      ...base.timing,
      elapsed,
      measured_iteration_seconds: measured,
      outside_measured_share: elapsed > 0 ? 1 - measured / elapsed : 0,
    },
    coverage: coverage(base.coverage, results, skipped),
    results,
    iteration_groups: groups,
    skipped_points: skipped,
    error,
    attention_dp: base.attention_dp === null
      ? null
      : { ...base.attention_dp, merged_ranks: summaries },
  };
}

function coverage(
  base: Coverage,
  results: readonly BenchResult[],
  skipped: readonly SkippedPoint[],
): Coverage {
  const by = (kind: PointKind) => ({
    planned: base.by_kind[kind].planned,
    measured: results.filter((r) => r.point.kind === kind).length,
    skipped: skipped.filter((s) => s.point.kind === kind).length,
  });
  const regimes: Record<string, number> = {};
  for (const r of results) regimes[r.kv_seed_regime] = (regimes[r.kv_seed_regime] ?? 0) + 1;
  return {
    ...base,
    points_measured: results.length,
    points_skipped: skipped.length,
    points_not_run: Math.max(0, base.points_planned - results.length - skipped.length),
    by_kind: { prefill: by("prefill"), decode: by("decode") },
    regimes,
  };
}

/**
 * Reads `<stem>_dp<r>.json` for r in 0..size-1 beside `out` (a missing file is a rank
 * that left no artifact; an unreadable or invalid one is an error naming it) and merges them.
 */
export function mergeRankFiles(out: string, size: number): BenchArtifact {
  const artifacts = [...Array(size).keys()].map((rank) => {
    const path = rankOutPath(out, rank);
    if (!existsSync(path)) return null;
    let value: unknown;
    try {
      value = JSON.parse(readFileSync(path, "utf8"));
    } catch (err) {
      throw new MergeError(`${path}: not JSON: ${(err as Error).message}`);
    }
    const problems = checkArtifact(value);
    if (problems.length > 0) {
      throw new MergeError(`${path}: not a benchmark artifact: ${problems.slice(0, 5).join("; ")}`);
    }
    return value as BenchArtifact;
  });
  return mergeRankArtifacts(artifacts);
}

/**
 * One line on what lockstep cost a rank: the per-step barrier against the steps it
 * ends, and (when measured) an idle round by itself.
 */
export function stepRoundLine(
  rank: number | string,
  s: DpStepRound,
  idle: DpRoundStats | null = null,
): string {
  const us = (x: number) => x.toFixed(0);
  return `rank ${rank}: per-step barrier ${us(s.mean_us)} µs mean (p50 ${us(s.p50_us)}, ` +
    `p90 ${us(s.p90_us)}, max ${us(s.max_us)}) over ${s.rounds} steps of ` +
    `${s.mean_step_ms.toFixed(2)} ms mean (${(100 * s.share).toFixed(2)}% of step time)` +
    (idle ? `; an idle round alone: ${us(idle.p50_us)} µs (p50 of ${idle.rounds})` : "");
}
