/**
 * The latency library: the measured rows of one or more benchmark artifacts, each with
 * the coordinates of the step that was actually timed (the FPM's scheduled sums, as the
 * reference design's consumers read them), its wall time and its `kv_seed_regime`.
 *
 * A point measured by several ranks of one run counts once, at its group wall (the
 * slowest rank, `iteration_groups`); rows at the same coordinates from several artifacts
 * are kept apart here and merged (median) by the predictor.
 *
 * ```ts
 * const rows = libraryRows([readArtifact("bench.json")]);
 * rows.filter((r) => r.kind === "decode" && r.regime === "real_kv");
 * ```
 */
import { readFileSync } from "node:fs";
import type { BenchArtifact, KvSeedRegime, PointKind } from "../bench/artifact.ts";

/** One measured row. Times in ms. */
export interface LibraryRow {
  readonly kind: PointKind;
  /** Requests in the timed step. */
  readonly batch: number;
  /** New prefill tokens of the timed step (decode: the batch, one token each). */
  readonly tokens: number;
  /** KV tokens the timed step read. */
  readonly kv: number;
  readonly wallMs: number;
  readonly gpuMs: number | null;
  readonly regime: KvSeedRegime;
  readonly pointKey: string;
  readonly benchmarkId: number;
  /** The raw samples' walls (ms) and how many the estimate is the median of. */
  readonly sampleWallsMs: readonly number[];
  readonly medianOf: number;
  /** The artifact's run id. */
  readonly runId: string;
}

/** Reads and checks an artifact file; throws naming the file and the problem. */
export function readArtifact(path: string): BenchArtifact {
  let obj: unknown;
  try {
    obj = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new Error(`${path}: cannot read the artifact: ${(err as Error).message}`);
  }
  return checkArtifact(obj, path);
}

/** Checks the fields the library reads; throws naming the artifact and the field. */
export function checkArtifact(obj: unknown, name: string): BenchArtifact {
  const a = obj as Partial<BenchArtifact> | null;
  if (!a || typeof a !== "object") throw new Error(`${name}: not a JSON object`);
  if (a.schema_version !== 2) {
    throw new Error(`${name}: schema_version ${a.schema_version}, this reader takes 2`);
  }
  if (!Array.isArray(a.results)) throw new Error(`${name}: results is not a list`);
  if (!Array.isArray(a.skipped_points)) throw new Error(`${name}: skipped_points is not a list`);
  for (const [i, r] of a.results.entries()) {
    const where = `${name}: results[${i}]`;
    if (!r || typeof r !== "object" || !r.point || !Array.isArray(r.fpms) || r.fpms.length === 0) {
      throw new Error(`${where}: needs a point and at least one fpm`);
    }
    if (r.point.kind !== "prefill" && r.point.kind !== "decode") {
      throw new Error(`${where}: point.kind must be prefill or decode`);
    }
    if (typeof r.kv_seed_regime !== "string") throw new Error(`${where}: kv_seed_regime`);
    for (const f of r.fpms) {
      if (typeof f.wall_time !== "number" || !(f.wall_time > 0)) {
        throw new Error(`${where}: fpm wall_time must be a number > 0`);
      }
      for (
        const key of [
          "num_prefill_requests",
          "sum_prefill_tokens",
          "sum_prefill_kv_tokens",
          "num_decode_requests",
          "sum_decode_kv_tokens",
        ] as const
      ) {
        if (!Number.isInteger(f[key]) || f[key] < 0) {
          throw new Error(`${where}: fpm ${key} must be an integer >= 0`);
        }
      }
    }
    // the row's coordinates come from its first fpm: a step of the point's kind
    const f = r.fpms[0];
    if (r.point.kind === "decode") {
      if (f.num_decode_requests < 1) {
        throw new Error(`${where}: a decode fpm needs num_decode_requests >= 1`);
      }
      if (f.sum_decode_kv_tokens < f.num_decode_requests) {
        throw new Error(`${where}: fpm sum_decode_kv_tokens < num_decode_requests`);
      }
    } else if (f.num_prefill_requests < 1 || f.sum_prefill_tokens < 1) {
      throw new Error(
        `${where}: a prefill fpm needs num_prefill_requests and sum_prefill_tokens >= 1`,
      );
    }
  }
  return a as BenchArtifact;
}

/** The measured rows of `artifacts` (skipped points have none). */
export function libraryRows(artifacts: readonly BenchArtifact[]): LibraryRow[] {
  const rows: LibraryRow[] = [];
  for (const a of artifacts) {
    const groups = new Map((a.iteration_groups ?? []).map((g) => [g.benchmark_id, g]));
    for (const r of a.results) {
      if (r.kv_seed_regime.startsWith("skip:")) continue;
      const fpm = r.fpms[0];
      const group = groups.get(r.benchmark_id);
      // a group's point: its estimate and samples are the group's (each sample the slowest
      // rank's), not this rank's own
      const grouped = group !== undefined && group.ranks > 1;
      const wall = grouped ? group.wall_time : Math.max(...r.fpms.map((f) => f.wall_time));
      const decode = r.point.kind === "decode";
      const m = fpm.benchmark_measurement;
      rows.push({
        kind: r.point.kind,
        batch: decode ? fpm.num_decode_requests : fpm.num_prefill_requests,
        tokens: decode ? fpm.num_decode_requests : fpm.sum_prefill_tokens,
        kv: decode ? fpm.sum_decode_kv_tokens : fpm.sum_prefill_kv_tokens,
        wallMs: wall * 1000,
        gpuMs: fpm.gpu_time === null ? null : fpm.gpu_time * 1000,
        regime: r.kv_seed_regime,
        pointKey: r.point_key,
        benchmarkId: r.benchmark_id,
        sampleWallsMs: (grouped ? group.iteration_walls : (m?.samples ?? []).map((s) =>
          s.wall_time
        ))
          .map((w) => w * 1000),
        medianOf: m?.estimate?.median_of ?? 1,
        runId: a.run_id,
      });
    }
  }
  return rows;
}
