/**
 * Collects what a run learns, piece by piece, and turns it into a {@link BenchArtifact}
 * at any moment: a checkpoint, the end of the run, an interrupt, or a failure (the
 * measured points are always kept). Parts not known yet (the engine before the model
 * loads) stay null.
 *
 * ```ts
 * const builder = new ArtifactBuilder({ runId, rank: 0, dpSize: 1, mode: "agg", ... });
 * builder.addResult(result, group);
 * writeJsonAtomic(out, builder.build("complete", "complete", null));
 * ```
 */
import {
  ARTIFACT_SCHEMA_VERSION,
  type AttentionDpSection,
  type BenchArtifact,
  type BenchCapacity,
  type BenchMode,
  type BenchResult,
  type Coverage,
  type EngineInfo,
  type GcPolicy,
  type IterationGroup,
  type KvwarmSection,
  type PointsSource,
  type RunError,
  type RunLimits,
  type RunStatus,
  type SkippedPoint,
  type StopReason,
  type SyntheticPrompts,
  type WarmupRecord,
} from "./artifact.ts";
import { kvwarmOffSection } from "./kvwarm/section.ts";
import type { PlannedPoint } from "./plan.ts";
import { SHAPE_KEY_RULE } from "./shape_key.ts";

/** What is known when the run starts. */
export interface RunIdentity {
  /** Unique id of the run. */
  readonly runId: string;
  /** This rank. */
  readonly rank: number;
  /** Ranks. */
  readonly dpSize: number;
  /** Which points. */
  readonly mode: BenchMode;
  /** Limits. */
  readonly limits: RunLimits;
  /** The content seed S. */
  readonly contentSeed: string;
}

/** The artifact under construction (see the module doc above). */
export class ArtifactBuilder {
  /** When the run started. */
  readonly startedAt = new Date();
  readonly #t0 = performance.now();
  /** Where the points came from. */
  pointsSource: PointsSource | null = null;
  /** The capacity. */
  capacity: BenchCapacity | null = null;
  /** The engine. */
  engine: EngineInfo | null = null;
  /** Prompt provenance. */
  syntheticPrompts: SyntheticPrompts;
  /** The kvwarm section (the decode seeder's, once it exists). */
  kvwarm: () => KvwarmSection;
  /** The GC record. */
  gc: () => GcPolicy = () => ({
    policy: "point_boundary",
    exposed: false,
    collections: 0,
    seconds: 0,
  });
  /** The attention-DP section (null for one rank). */
  attentionDp: () => AttentionDpSection | null = () => null;
  /** The decode preparation method. */
  decodePreparation = "fake_kv_injection_untimed";
  /** The prefill KV-read preparation (`real_prefix_staged_warm_shot_exact_hit` with real seeding). */
  prefillPreparation = "fake_prefix_exact_hit";
  /** What no timed sample holds beyond the protocol's own list (kvwarm: `kvwarm_stage`). */
  unobservedExtra: readonly string[] = [];
  /** The planned grid. */
  planned: readonly PlannedPoint[] = [];
  /** Its digest. */
  gridDigest: string | null = null;
  /** Generated points dropped as infeasible. */
  generatedInfeasible = 0;
  /** Seconds of model load and engine set-up. */
  setupSeconds = 0;
  /** The warm-up. */
  warmup: WarmupRecord | null = null;
  /** performance.now() when the sweep (its warm-up, then the point loop) started (null before). */
  sweepStartedMs: number | null = null;
  /** performance.now() when the point loop started (null before). */
  loopStartedMs: number | null = null;
  readonly #results: BenchResult[] = [];
  readonly #groups: IterationGroup[] = [];
  readonly #skipped: SkippedPoint[] = [];
  #measuredSeconds = 0;

  /** A builder for the run `identity`. */
  constructor(readonly identity: RunIdentity) {
    this.syntheticPrompts = {
      mode: "random",
      vocab_size: 0,
      zeros_fallback: false,
      fallback_reason: null,
      text: null,
    };
    this.kvwarm = () => kvwarmOffSection("off", "flag_off");
  }

  /** Measured points so far. */
  get results(): readonly BenchResult[] {
    return this.#results;
  }

  /** Skipped points so far. */
  get skipped(): readonly SkippedPoint[] {
    return this.#skipped;
  }

  /** Adds a measured point and its iteration group. */
  addResult(result: BenchResult, group: IterationGroup): void {
    this.#results.push(result);
    this.#groups.push(group);
    for (const f of result.fpms) {
      if (f.rank === this.identity.rank) {
        this.#measuredSeconds += f.benchmark_measurement.samples.reduce(
          (s, x) => s + x.wall_time,
          0,
        );
      }
    }
  }

  /** Adds a skipped point. */
  addSkipped(skipped: SkippedPoint): void {
    this.#skipped.push(skipped);
  }

  /** The artifact as of now. */
  build(status: RunStatus, stopReason: StopReason, error: RunError | null): BenchArtifact {
    const now = performance.now();
    const elapsed = (now - this.#t0) / 1000;
    // the first point's kvwarm stage built inside the warm-up is the loop's work
    const counted = this.warmup?.clock?.counted_seconds ?? 0;
    const loopMinutes = this.loopStartedMs === null
      ? 0
      : (now - this.loopStartedMs) / 60000 + counted / 60;
    const finished = this.#results.length + this.#skipped.length;
    const { limits } = this.identity;
    return {
      schema_version: ARTIFACT_SCHEMA_VERSION,
      status,
      valid: status !== "failed",
      usable: status === "complete" && this.#skipped.length === 0,
      stop_reason: stopReason,
      run_id: this.identity.runId,
      rank: this.identity.rank,
      dp_size: this.identity.dpSize,
      mode: this.identity.mode,
      grid_digest: this.gridDigest,
      points_source: this.pointsSource,
      timing: {
        started_at: this.startedAt.toISOString(),
        finished_at: new Date().toISOString(),
        elapsed,
        setup_seconds: this.setupSeconds,
        warmup_seconds: this.warmup?.seconds ?? 0,
        measured_iteration_seconds: this.#measuredSeconds,
        outside_measured_share: elapsed > 0 ? 1 - this.#measuredSeconds / elapsed : 0,
        points_per_minute: loopMinutes > 0 ? finished / loopMinutes : 0,
      },
      coverage: this.#coverage(),
      limits,
      capacity: this.capacity,
      engine: this.engine,
      measurement_protocol: {
        content_identity: "content-v1:{content_seed}:dp{rank}:{content_salt}",
        content_seed: this.identity.contentSeed,
        synthetic_content: this.syntheticPrompts.mode !== "text",
        timing_metric: "host_wall_schedule_end_to_output_arrival",
        steady_timing: "output_arrival_gap",
        gpu_timing: this.engine?.adapter?.timestamps ? "timestamp_query_pass" : "unavailable",
        unobserved: [
          "prefill_schedule",
          "admission_step",
          "kv_injection",
          "prefix_seeding",
          "discarded_replica",
          "warmup",
          "gc",
          ...this.unobservedExtra,
        ],
        preparation: {
          decode: this.decodePreparation,
          prefill_kv_read: this.prefillPreparation,
          replica: "one_discarded_replica_per_new_shape",
          shape_key: SHAPE_KEY_RULE,
          warmup: this.warmup,
        },
        median: {
          method: "upper_median",
          repeats: limits.repeats,
          giant_kv_threshold: limits.giant_kv_threshold,
          applies_to: [
            "real_kv",
            "real_prefix",
            `total_kv_read_tokens>=${limits.giant_kv_threshold}`,
          ],
        },
        gc: this.gc(),
        async_scheduling: this.engine?.async_scheduling ?? true,
      },
      measurement_policy: { decode: "steady_state_second_step", prefill: "single_step" },
      synthetic_prompts: this.syntheticPrompts,
      kvwarm: this.#kvwarmMeasured(),
      results: [...this.#results],
      iteration_groups: [...this.#groups],
      skipped_points: [...this.#skipped],
      error,
      attention_dp: this.attentionDp(),
    };
  }

  /**
   * The kvwarm section with its point counts taken from the rows written: the seeder counts a
   * point when it seeds it, and a point skipped after that (a shed shadow, a shape mismatch)
   * has no row to count.
   */
  #kvwarmMeasured(): KvwarmSection {
    const k = this.kvwarm();
    if (!k.enabled) return k;
    const rows = (regime: string) => this.#results.filter((r) => r.kv_seed_regime === regime);
    return {
      ...k,
      points_real_kv: rows("real_kv").length,
      points_fake_fallback: rows("fake_fallback").length,
    };
  }

  #coverage(): Coverage {
    const by = (kind: "prefill" | "decode") => ({
      planned: this.planned.filter((p) => p.point.kind === kind).length,
      measured: this.#results.filter((r) => r.point.kind === kind).length,
      skipped: this.#skipped.filter((s) => s.point.kind === kind).length,
    });
    const regimes: Record<string, number> = {};
    for (const r of this.#results) regimes[r.kv_seed_regime] = (regimes[r.kv_seed_regime] ?? 0) + 1;
    const measured = this.#results.length, skipped = this.#skipped.length;
    return {
      points_planned: this.planned.length,
      points_measured: measured,
      points_skipped: skipped,
      points_not_run: Math.max(0, this.planned.length - measured - skipped),
      generated_infeasible: this.generatedInfeasible,
      by_kind: { prefill: by("prefill"), decode: by("decode") },
      regimes,
    };
  }
}
