/**
 * Builds complete benchmark artifacts (every field of the schema-2 types) from a list of
 * points and their wall times, for the predictor, fidelity and report tests. Nothing is
 * measured: each row's wall is the caller's, so tests can check predictions exactly.
 */
import type {
  BenchArtifact,
  BenchPoint,
  BenchResult,
  Fpm,
  KvSeedRegime,
  MeasuredSample,
  SkippedPoint,
} from "../../src/bench/artifact.ts";

/** A row to put in the artifact. */
export interface SyntheticRow {
  readonly point: BenchPoint;
  readonly regime: KvSeedRegime;
  /** Walls of the timed samples, s (the estimate is their upper median). */
  readonly walls: readonly number[];
  readonly gpu?: number | null;
}

const key = (p: BenchPoint) =>
  p.kind === "decode"
    ? `decode:${p.batch_size}:${p.total_kv_read_tokens}`
    : `prefill:${p.batch_size}:${p.total_prefill_tokens}:${p.total_kv_read_tokens}`;

/** A schema-2 artifact holding `rows` (and `skipped` as skipped points). */
export function syntheticArtifact(
  rows: readonly SyntheticRow[],
  options: { runId?: string; skipped?: readonly { point: BenchPoint; reason: string }[] } = {},
): BenchArtifact {
  let id = 0;
  const results: BenchResult[] = rows.map((row) => {
    const benchmark_id = ++id;
    const p = row.point;
    const decode = p.kind === "decode";
    const sums = {
      num_requests: p.batch_size,
      num_scheduled_tokens: decode ? p.batch_size : p.total_prefill_tokens,
      num_prefill_requests: decode ? 0 : p.batch_size,
      sum_prefill_tokens: decode ? 0 : p.total_prefill_tokens,
      sum_prefill_kv_tokens: decode ? 0 : p.total_kv_read_tokens,
      num_decode_requests: decode ? p.batch_size : 0,
      sum_decode_kv_tokens: decode ? p.total_kv_read_tokens : 0,
      num_preempted: 0,
      num_block_copies: 0,
    };
    const samples: MeasuredSample[] = row.walls.map((w, index) => ({
      ...sums,
      index,
      step_id: 100 + benchmark_id * 10 + index,
      wall_time: w,
      schedule_to_output_time: w,
      gpu_time: row.gpu ?? null,
    }));
    const sorted = row.walls.map((w, i) => [w, i] as const).sort((a, b) => a[0] - b[0]);
    const [wall, chosen] = sorted[sorted.length >> 1];
    const fpm: Fpm = {
      ...sums,
      rank: 0,
      wall_time: wall,
      gpu_time: row.gpu ?? null,
      benchmark_measurement: {
        benchmark_id,
        point_key: key(p),
        kind: p.kind,
        prompts: [],
        preparation: {
          method: decode ? "fake_kv_injection" : "none",
          seconds: 0.01,
          blocks: 4,
          prefix_hit_tokens: decode ? 0 : p.total_kv_read_tokens,
          replica: false,
          shape_key: decode
            ? `decode:${p.batch_size}`
            : `prefill:${p.batch_size}:${p.total_prefill_tokens}`,
          replica_seconds: 0,
        },
        admission: null,
        samples,
        estimate: {
          method: row.walls.length > 1 ? "upper_median" : "single_sample",
          median_of: row.walls.length,
          sample_indices: [chosen],
          wall_time: wall,
          gpu_time: row.gpu ?? null,
        },
      },
    };
    return {
      benchmark_id,
      point: p,
      point_key: key(p),
      kv_seed_regime: row.regime,
      repeats: row.walls.length,
      kv_pool: { blocks_total: 100, blocks_free_before: 100, blocks_free_after: 100 },
      fpms: [fpm],
    };
  });
  const skipped: SkippedPoint[] = (options.skipped ?? []).map((s) => ({
    benchmark_id: ++id,
    point: s.point,
    point_key: key(s.point),
    kv_seed_regime: s.point.kind === "decode" ? "legacy" : "not_applicable",
    reason: s.reason,
  }));
  const count = (kind: "prefill" | "decode") => ({
    planned: rows.filter((r) => r.point.kind === kind).length +
      skipped.filter((s) => s.point.kind === kind).length,
    measured: rows.filter((r) => r.point.kind === kind).length,
    skipped: skipped.filter((s) => s.point.kind === kind).length,
  });
  const regimes: Record<string, number> = {};
  for (const r of rows) regimes[r.regime] = (regimes[r.regime] ?? 0) + 1;
  return {
    schema_version: 2,
    status: "complete",
    valid: true,
    usable: skipped.length === 0,
    stop_reason: "complete",
    run_id: options.runId ?? "synthetic-run",
    rank: 0,
    dp_size: 1,
    mode: "agg",
    grid_digest: "0".repeat(64),
    points_source: { kind: "manifest", path: "synthetic.json", sha256: "0".repeat(64) },
    timing: {
      started_at: "2025-01-01T00:00:00.000Z",
      finished_at: "2025-01-01T00:01:00.000Z",
      elapsed: 60,
      setup_seconds: 5,
      warmup_seconds: 1,
      measured_iteration_seconds: rows.reduce((s, r) => s + r.walls.reduce((a, b) => a + b, 0), 0),
      outside_measured_share: 0.9,
      points_per_minute: rows.length,
    },
    coverage: {
      points_planned: rows.length + skipped.length,
      points_measured: rows.length,
      points_skipped: skipped.length,
      points_not_run: 0,
      generated_infeasible: 0,
      by_kind: { prefill: count("prefill"), decode: count("decode") },
      regimes,
    },
    limits: {
      soft_timeout_seconds: null,
      repeats: 3,
      giant_kv_threshold: 1_000_000,
      checkpoint_every_points: 8,
    },
    capacity: {
      block_size: 16,
      blocks_total: 100,
      watermark_blocks: 1,
      usable_blocks: 99,
      max_model_len: 4096,
      max_num_seqs: 32,
      max_batched_tokens: 2048,
      prefix_caching: true,
    },
    engine: {
      model: "synthetic:test",
      architecture: "Qwen3MoeForCausalLM",
      moe: true,
      num_layers: 2,
      hidden_size: 64,
      num_experts: 8,
      experts_per_token: 2,
      vocab_size: 151936,
      dtype: "f16",
      num_blocks: 101,
      async_scheduling: true,
      adapter: null,
      runtime: "deno test",
      webfpm_version: "0.1.0",
    },
    measurement_protocol: {
      content_identity: "content-v1",
      content_seed: "0",
      synthetic_content: true,
      timing_metric: "host_wall_schedule_end_to_output_arrival",
      steady_timing: "output_arrival_gap",
      gpu_timing: "unavailable",
      unobserved: ["admission_step"],
      preparation: {
        decode: "fake_kv_injection_untimed",
        prefill_kv_read: "fake_prefix_exact_hit",
        replica: "one_discarded_replica_per_new_shape",
        shape_key: "decode:B | prefill:B:T",
        warmup: null,
      },
      median: {
        method: "upper_median",
        repeats: 3,
        giant_kv_threshold: 1_000_000,
        applies_to: ["real_kv", "total_kv>=threshold"],
      },
      gc: { policy: "point_boundary", exposed: true, collections: 0, seconds: 0 },
      async_scheduling: true,
    },
    measurement_policy: { decode: "steady_state_second_step", prefill: "single_step" },
    synthetic_prompts: {
      mode: "random",
      vocab_size: 151936,
      zeros_fallback: false,
      fallback_reason: null,
      text: null,
    },
    kvwarm: {
      enabled: false,
      requested: "off",
      warm_eligible: false,
      skip_reason: "flag_off",
      dataset: null,
      stages: [],
      points_real_kv: rows.filter((r) => r.regime === "real_kv").length,
      points_fake_fallback: rows.filter((r) => r.regime === "fake_fallback").length,
      capacity_fallbacks: [],
      shadow_tail: null,
      settlement: null,
      chains: null,
      point_fallbacks: [],
      prefill_real_seed: {
        enabled: false,
        shots_staged: 0,
        warm_shots: 0,
        restages: 0,
        misses: 0,
      },
    },
    results,
    iteration_groups: results.map((r) => ({
      benchmark_id: r.benchmark_id,
      point_key: r.point_key,
      ranks: 1,
      iteration_walls: r.fpms[0].benchmark_measurement.samples.map((s) => s.wall_time),
      wall_time: r.fpms[0].wall_time,
    })),
    skipped_points: skipped,
    error: null,
    attention_dp: null,
  };
}

/** A decode point. */
export const decodePoint = (batch_size: number, total_kv_read_tokens: number): BenchPoint => ({
  kind: "decode",
  batch_size,
  total_kv_read_tokens,
});

/** A prefill point. */
export const prefillPoint = (
  batch_size: number,
  total_prefill_tokens: number,
  total_kv_read_tokens = 0,
): BenchPoint => ({ kind: "prefill", batch_size, total_prefill_tokens, total_kv_read_tokens });
