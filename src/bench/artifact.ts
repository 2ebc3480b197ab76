/**
 * The benchmark artifact: what `deno task bench` writes, one JSON file per rank,
 * `schema_version: 2`. These types are the contract with everything that reads
 * artifacts (report, predictor, fidelity): they change only by adding fields.
 *
 * Units: times are seconds (`wall_time`, `gpu_time`, `elapsed`), token counts are
 * tokens, pool sizes are KV blocks. Field names are snake_case, as in the reference
 * design's artifact.
 *
 * A consumer fits `wall ~ sum_prefill_tokens` (prefill) and
 * `wall ~ (num_decode_requests, sum_decode_kv_tokens)` (decode) over the rows of
 * `results[].fpms[]`, whose scheduled sums are those of the measured step itself.
 *
 * ```ts
 * import type { BenchArtifact } from "../bench/artifact.ts";
 * const a = JSON.parse(readFileSync(path, "utf8")) as BenchArtifact;
 * if (a.schema_version !== 2 || !a.valid) throw new Error(`${path}: not usable`);
 * for (const r of a.results) console.log(r.point_key, r.fpms[0].wall_time);
 * ```
 */

/** The schema version these types describe. */
export const ARTIFACT_SCHEMA_VERSION = 2;

/** Prefill or decode. */
export type PointKind = "prefill" | "decode";

/**
 * A prefill point: `batch_size` requests that together compute `total_prefill_tokens`
 * new tokens in one step after reading `total_kv_read_tokens` tokens of cached prefix
 * (whole hash blocks, at least one per request when non-zero).
 */
export interface PrefillPoint {
  /** Always "prefill". */
  readonly kind: "prefill";
  /** Requests in the measured step (B). */
  readonly batch_size: number;
  /** New tokens over all requests (T >= B). */
  readonly total_prefill_tokens: number;
  /** Cached prefix tokens read over all requests (K == 0 or K >= B). */
  readonly total_kv_read_tokens: number;
}

/**
 * A decode point: `batch_size` requests each decoding one token, reading
 * `total_kv_read_tokens` KV tokens together in the steady step (the coordinate is the
 * steady one: `sum(max(1, ctx - 1)) + B` over the balanced partition of the total).
 */
export interface DecodePoint {
  /** Always "decode". */
  readonly kind: "decode";
  /** Requests in the measured step (B). */
  readonly batch_size: number;
  /** KV tokens read over all requests (K >= B). */
  readonly total_kv_read_tokens: number;
}

/** A point of the grid. */
export type BenchPoint = PrefillPoint | DecodePoint;

/**
 * Where a decode point's KV came from: `real_kv` (a real prefill of a kvwarm chain),
 * `fake_fallback` (kvwarm was on but this point fell back to fake KV), `legacy` (fake KV
 * injection, kvwarm off), `skip:<reason>` (not measured).
 */
export type DecodeKvSeedRegime = "real_kv" | "fake_fallback" | "legacy" | `skip:${string}`;

/**
 * Where a prefill point's cached prefix came from: `real_prefix` (computed by a real
 * staged prefill), `fake_prefix` (injected blocks, never computed), `not_applicable`
 * (the point reads no prefix).
 */
export type PrefillKvSeedRegime = "real_prefix" | "fake_prefix" | "not_applicable";

/** Either regime vocabulary. */
export type KvSeedRegime = DecodeKvSeedRegime | PrefillKvSeedRegime;

/** How the run ended. */
export type RunStatus = "complete" | "partial" | "failed";

/**
 * Why the run stopped: every point attempted (`complete`), the soft timeout at a point
 * boundary (`soft_timeout`), Ctrl-C / SIGTERM (`interrupted`), an error (`error`), input
 * rejected before anything ran (`input_error`), or a checkpoint of a run still going
 * (`checkpoint`; the file is rewritten when the run ends).
 */
export type StopReason =
  | "complete"
  | "soft_timeout"
  | "interrupted"
  | "error"
  | "input_error"
  | "checkpoint";

/** How prompt tokens are made. */
export type ContentMode = "random" | "text" | "zeros";

/** What the benchmark measured: prefill points, decode points, or both. */
export type BenchMode = "prefill" | "decode" | "agg";

/** The counts of one step as the scheduler planned it (the engine's StepObservation). */
export interface ScheduledSums {
  /** Requests in the step. */
  readonly num_requests: number;
  /** Tokens computed by the step. */
  readonly num_scheduled_tokens: number;
  /** Requests computing prompt tokens. */
  readonly num_prefill_requests: number;
  /** New tokens of the prefill requests. */
  readonly sum_prefill_tokens: number;
  /** KV tokens the prefill requests read (computed before the step). */
  readonly sum_prefill_kv_tokens: number;
  /** Requests decoding one token after their whole prompt. */
  readonly num_decode_requests: number;
  /** KV tokens the decode requests read (computed before the step). */
  readonly sum_decode_kv_tokens: number;
  /** Requests preempted while scheduling the step (0 in a valid measurement). */
  readonly num_preempted: number;
  /** Copy-on-write block copies the step carried. */
  readonly num_block_copies: number;
}

/** One timed step (a raw sample). */
export interface MeasuredSample extends ScheduledSums {
  /** Index among the point's samples (0-based). */
  readonly index: number;
  /** Engine step id. */
  readonly step_id: number;
  /**
   * Host wall time, s. Prefill: from the end of the step's schedule to its output's
   * arrival. Steady decode: the gap between the previous step's output arrival and this
   * step's.
   */
  readonly wall_time: number;
  /** From the end of this step's schedule to its output's arrival, s (equals wall_time for prefill). */
  readonly schedule_to_output_time: number;
  /** GPU time from timestamp queries, s; null where the adapter has none. */
  readonly gpu_time: number | null;
}

/** The decode admission step (untimed in the estimate; kept for audit). */
export interface AdmissionStep extends ScheduledSums {
  /** Engine step id. */
  readonly step_id: number;
  /** From the end of its schedule to its output's arrival, s. */
  readonly schedule_to_output_time: number;
  /** GPU time, s, or null. */
  readonly gpu_time: number | null;
}

/** One request of a measured point. */
export interface PromptRecord {
  /** Request index within the point (0..B-1). */
  readonly slot: number;
  /** Shot (prefill repeats run fresh requests per shot; decode has shot 0 only). */
  readonly shot: number;
  /** Engine request id. */
  readonly request_id: string;
  /** The request's unique cache_salt. */
  readonly cache_salt: string;
  /** The content salt its tokens were drawn from (null when the seeder chose the tokens). */
  readonly content_salt: string | null;
  /** Prompt length in tokens. */
  readonly prompt_tokens: number;
  /** Tokens counted as computed when it was admitted (fake KV, fake prefix hit). */
  readonly computed_tokens: number;
  /** sha256 (hex) of the prompt ids as uint32 little-endian. */
  readonly sha256: string;
}

/** How a point was prepared before its timed step(s) (all untimed). */
export interface Preparation {
  /**
   * `fake_kv_injection` (decode: blocks allocated, marked computed, hashed and registered
   * in the untimed window), `fake_prefix` (prefill: injected prefix blocks freed to the
   * cache and hit exactly), `none` (prefill without prefix), or a seeder's own method
   * (`shadow` for kvwarm).
   */
  readonly method: string;
  /** Host seconds spent preparing (injection, seeding). */
  readonly seconds: number;
  /** KV blocks taken by the preparation. */
  readonly blocks: number;
  /** Prefill: prefix tokens the measuring requests hit (== the point's K when exact). */
  readonly prefix_hit_tokens: number;
  /** Whether a discarded replica of the point ran first (the point's shape was new). */
  readonly replica: boolean;
  /** The shape key that decided the replica. */
  readonly shape_key: string;
  /** Seconds the discarded replica took (0 without one). */
  readonly replica_seconds: number;
}

/** How the point's wall time was chosen from its samples. */
export interface Estimate {
  /** `single_sample` (one sample) or `upper_median` (`sorted(walls)[n // 2]`). */
  readonly method: "single_sample" | "upper_median";
  /** Number of samples the estimate is over. */
  readonly median_of: number;
  /** Indices into `samples` the estimate came from (one for a median). */
  readonly sample_indices: readonly number[];
  /** The estimate, s. */
  readonly wall_time: number;
  /** GPU time of the chosen sample, s, or null. */
  readonly gpu_time: number | null;
}

/** The audit trail of one rank's measurement of a point. */
export interface BenchmarkMeasurement {
  /** The point's id (1..N in execution order). */
  readonly benchmark_id: number;
  /** The point's key (see `pointKey`). */
  readonly point_key: string;
  /** Prefill or decode. */
  readonly kind: PointKind;
  /** Every measured request. */
  readonly prompts: readonly PromptRecord[];
  /** What happened before timing. */
  readonly preparation: Preparation;
  /** The decode admission step (null for prefill). */
  readonly admission: AdmissionStep | null;
  /** The raw timed samples (steady steps, or prefill shots). */
  readonly samples: readonly MeasuredSample[];
  /** How `wall_time` was chosen. */
  readonly estimate: Estimate;
}

/**
 * One forward-pass metric row: a rank's measurement of a point. Its scheduled sums are
 * those of the sample the estimate chose (for a decode point, its steady step).
 */
export interface Fpm extends ScheduledSums {
  /** The rank that measured it. */
  readonly rank: number;
  /** The estimate of the step's host wall time, s. */
  readonly wall_time: number;
  /** GPU time of the same sample, s, or null. */
  readonly gpu_time: number | null;
  /** How it was measured. */
  readonly benchmark_measurement: BenchmarkMeasurement;
}

/** The KV pool around a point: free blocks before preparation and after cleanup (equal). */
export interface KvPoolBalance {
  /** Usable blocks of the pool. */
  readonly blocks_total: number;
  /** Free blocks (cached or not) before the point was prepared. */
  readonly blocks_free_before: number;
  /** Free blocks after the point's requests were released and their frees completed. */
  readonly blocks_free_after: number;
}

/** A measured point. */
export interface BenchResult {
  /** 1..N in execution order (shared with skipped points). */
  readonly benchmark_id: number;
  /** The point. */
  readonly point: BenchPoint;
  /** Its key. */
  readonly point_key: string;
  /** Where its KV (decode) or prefix (prefill) came from. */
  readonly kv_seed_regime: KvSeedRegime;
  /** Timed samples of the point: steady steps (decode) or shots (prefill); 1 or `--repeats`. */
  readonly repeats: number;
  /** Pool accounting around the point. */
  readonly kv_pool: KvPoolBalance;
  /** One row per rank (this file: this rank's). */
  readonly fpms: readonly Fpm[];
}

/** A point of the grid that was not measured, and why. */
export interface SkippedPoint {
  /** Its id. */
  readonly benchmark_id: number;
  /** The point. */
  readonly point: BenchPoint;
  /** Its key. */
  readonly point_key: string;
  /** Its regime (the one it would have had, or `skip:<reason>`). */
  readonly kv_seed_regime: KvSeedRegime;
  /** Why: e.g. `fake_prefix_miss: ...`, `scheduled_shape_mismatch: ...`. */
  readonly reason: string;
}

/** The group's view of a point: per sample the slowest rank's wall. */
export interface IterationGroup {
  /** The point's id. */
  readonly benchmark_id: number;
  /** Its key. */
  readonly point_key: string;
  /** Ranks that measured it. */
  readonly ranks: number;
  /** Per sample, max over ranks, s. */
  readonly iteration_walls: readonly number[];
  /** The estimate over `iteration_walls` with the point's method, s. */
  readonly wall_time: number;
}

/** Run timing. */
export interface RunTiming {
  /** ISO time the run started. */
  readonly started_at: string;
  /** ISO time the artifact was written. */
  readonly finished_at: string;
  /** Seconds from start to this write. */
  readonly elapsed: number;
  /** Seconds spent loading the model and building the engine. */
  readonly setup_seconds: number;
  /** Seconds of the warm-up (not the kvwarm stage built inside it: warmup.clock.counted_seconds). */
  readonly warmup_seconds: number;
  /** Sum of every raw timed sample, s. */
  readonly measured_iteration_seconds: number;
  /** 1 - measured_iteration_seconds / elapsed. */
  readonly outside_measured_share: number;
  /**
   * Measured and skipped points per minute of the point loop, the first kvwarm stage's build
   * counted in it though it ran inside the warm-up (warmup.clock.counted_seconds).
   */
  readonly points_per_minute: number;
}

/** How much of the grid ran. */
export interface Coverage {
  /** Points in the grid. */
  readonly points_planned: number;
  /** Points with a result. */
  readonly points_measured: number;
  /** Points skipped with a reason. */
  readonly points_skipped: number;
  /** Points never reached (soft timeout, interrupt, error). */
  readonly points_not_run: number;
  /** Generated points dropped before numbering as infeasible for this engine. */
  readonly generated_infeasible: number;
  /** Per kind: planned / measured / skipped. */
  readonly by_kind: Readonly<
    Record<
      PointKind,
      { readonly planned: number; readonly measured: number; readonly skipped: number }
    >
  >;
  /** Measured points per kv_seed_regime. */
  readonly regimes: Readonly<Record<string, number>>;
}

/** Sample limits of the generated grid (the design's, unless changed by `--grid`). */
export interface GridLimits {
  /** Decode batch axis samples (128). */
  readonly decode_batch_samples: number;
  /** Decode KV ladder samples per batch (128). */
  readonly decode_kv_samples: number;
  /** Prefill token axis samples (64). */
  readonly prefill_token_samples: number;
  /** Prefill batch sizes: the N smallest legal powers of two (3). */
  readonly prefill_batch_sizes: number;
  /** Prefill KV-read axis samples (16). */
  readonly prefill_kv_read_samples: number;
}

/** Where the points came from. */
export type PointsSource =
  | {
    /** An explicit manifest. */
    readonly kind: "manifest";
    /** Its path. */
    readonly path: string;
    /** sha256 of its bytes. */
    readonly sha256: string;
  }
  | {
    /** The generated grid. */
    readonly kind: "generated";
    /** Preset name (`full` or `smoke`). */
    readonly preset: string;
    /** Its sample limits. */
    readonly limits: GridLimits;
  };

/** Run limits and knobs. */
export interface RunLimits {
  /**
   * Soft timeout, s, from the sweep's start (its warm-up included; before session 29, from the
   * point loop's), checked at point boundaries, in kvwarm's stage builds and in the clock
   * warm-up; null for none.
   */
  readonly soft_timeout_seconds: number | null;
  /** Samples of a median-of-N point. */
  readonly repeats: number;
  /** Points whose total KV reaches this are measured median-of-N. */
  readonly giant_kv_threshold: number;
  /** A checkpoint is written after this many points. */
  readonly checkpoint_every_points: number;
}

/** What the engine can hold: the envelope points are planned against. */
export interface BenchCapacity {
  /** Tokens per KV block (= hash block). */
  readonly block_size: number;
  /** Usable blocks of the pool (the null block excluded). */
  readonly blocks_total: number;
  /** Blocks a newly admitted request must leave free. */
  readonly watermark_blocks: number;
  /** blocks_total - watermark_blocks. */
  readonly usable_blocks: number;
  /** Prompt plus output tokens of one request at most. */
  readonly max_model_len: number;
  /** Requests in one step at most. */
  readonly max_num_seqs: number;
  /** Tokens in one step at most. */
  readonly max_batched_tokens: number;
  /** Prefix caching on (the KV-read axis needs it). */
  readonly prefix_caching: boolean;
}

/** The adapter the run used. */
export interface AdapterInfo {
  /** Adapter description. */
  readonly description: string;
  /** Vendor. */
  readonly vendor: string;
  /** Architecture. */
  readonly architecture: string;
  /** "discrete GPU", "cpu", ... */
  readonly type: string;
  /** "vulkan", ... */
  readonly backend: string;
  /** Driver string. */
  readonly driver: string;
  /** Timestamp queries available (GPU times recorded). */
  readonly timestamps: boolean;
  /** shader-f16 available. */
  readonly f16: boolean;
}

/** The engine and model that were measured. */
export interface EngineInfo {
  /** The model spec as given (`synthetic:NAME` or a directory). */
  readonly model: string;
  /** config.json architecture. */
  readonly architecture: string;
  /** True when some layer is a mixture of experts. */
  readonly moe: boolean;
  /** Decoder layers. */
  readonly num_layers: number;
  /** Hidden size. */
  readonly hidden_size: number;
  /** Experts per MoE layer (0 for dense). */
  readonly num_experts: number;
  /** Experts per token (0 for dense). */
  readonly experts_per_token: number;
  /** The model's real vocabulary size. */
  readonly vocab_size: number;
  /** Storage type of weights and KV. */
  readonly dtype: string;
  /** KV blocks (the null block included). */
  readonly num_blocks: number;
  /** Steps scheduled while the previous runs (always true in the benchmark). */
  readonly async_scheduling: boolean;
  /** The adapter, or null where it is unknown (a CPU test double). */
  readonly adapter: AdapterInfo | null;
  /** "deno 2.9.6", "node 20...". */
  readonly runtime: string;
  /** webfpm's package version. */
  readonly webfpm_version: string;
}

/** The garbage-collection policy and what it did. */
export interface GcPolicy {
  /**
   * `point_boundary`: a collection before each point; inside a point none, except (under
   * Deno) one every 2 s of GPU waiting (src/gpu/event_pacing.ts).
   */
  readonly policy: "point_boundary";
  /** Whether `globalThis.gc` was exposed (`--v8-flags=--expose-gc`). */
  readonly exposed: boolean;
  /** Collections run. */
  readonly collections: number;
  /** Seconds they took. */
  readonly seconds: number;
}

/** The warm-up before any point. */
export interface WarmupRecord {
  /** Prompt tokens of the warm-up request. */
  readonly prompt_tokens: number;
  /** Steps it ran. */
  readonly steps: number;
  /** Seconds, the clock warm-up's included (not the work it counted: see `clock`). */
  readonly seconds: number;
  /** The clock warm-up after it (--warmup-s; null when 0, as on a CPU adapter). */
  readonly clock: ClockWarmupRecord | null;
}

/** The clock warm-up: requests run back to back until the warm-up lasted `min_seconds`. */
export interface ClockWarmupRecord {
  /** Seconds the warm-up was to last at least. */
  readonly min_seconds: number;
  /** Prompt tokens of each request at most (a prefill and one decode; fewer where the pool is short). */
  readonly prompt_tokens: number;
  /** Requests it ran. */
  readonly requests: number;
  /** Steps they took. */
  readonly steps: number;
  /** Seconds they took. */
  readonly seconds: number;
  /**
   * Seconds of the sweep's own GPU work run before them that counted toward `min_seconds`
   * (kvwarm's first stage, recorded in its build_seconds; 0 when none ran there). Absent in
   * artifacts written before it was recorded.
   */
  readonly counted_seconds?: number;
  /**
   * What ended it: `time` (min_seconds passed), `pool` (no room for a request beside parked
   * kvwarm chains) or `stop` (the group's vote for another rank, or the soft timeout).
   * Absent in artifacts written before it was recorded.
   */
  readonly ended?: ClockWarmupEnd;
}

/** What ended the clock warm-up (ClockWarmupRecord.ended). */
export type ClockWarmupEnd = "time" | "pool" | "stop";

/** How every point is measured. */
export interface MeasurementProtocol {
  /** How prompt content is identified: `content-v1` seeds per content salt. */
  readonly content_identity: string;
  /** The content seed S of `content-v1:{S}:dp{rank}:{salt}`. */
  readonly content_seed: string;
  /** True when prompt tokens are synthetic (random or zeros), false for real text. */
  readonly synthetic_content: boolean;
  /** `host_wall_schedule_end_to_output_arrival`. */
  readonly timing_metric: string;
  /** `output_arrival_gap`: a steady step's wall is the gap between consecutive outputs. */
  readonly steady_timing: string;
  /** `timestamp_query_pass` or `unavailable`. */
  readonly gpu_timing: string;
  /**
   * What no timed sample contains: `prefill_schedule` (a prefill step's clock starts after
   * scheduling; a steady decode gap holds the next step's scheduling, overlapped with the
   * GPU as in production), `admission_step`, `kv_injection`, `prefix_seeding`,
   * `discarded_replica`, `warmup`, `gc` (forced collections; V8's own minor collections can
   * still land anywhere).
   */
  readonly unobserved: readonly string[];
  /** How points are prepared. */
  readonly preparation: {
    /** Decode preparation (`fake_kv_injection_untimed`, or a seeder's). */
    readonly decode: string;
    /** Prefill KV-read preparation (`fake_prefix_exact_hit`). */
    readonly prefill_kv_read: string;
    /** `one_discarded_replica_per_new_shape`. */
    readonly replica: string;
    /** What a shape is: `decode:B` or `prefill:B:T`. */
    readonly shape_key: string;
    /** The warm-up (null before it ran). */
    readonly warmup: WarmupRecord | null;
  };
  /** Median-of-N policy. */
  readonly median: {
    /** `upper_median`. */
    readonly method: string;
    /** N. */
    readonly repeats: number;
    /** Total-KV threshold. */
    readonly giant_kv_threshold: number;
    /** Which points: real-KV points and points with total KV >= threshold. */
    readonly applies_to: readonly string[];
  };
  /** Garbage collection. */
  readonly gc: GcPolicy;
  /** Steps scheduled while the previous one runs. */
  readonly async_scheduling: boolean;
}

/** The measurement policy names of the reference design. */
export interface MeasurementPolicy {
  /** Always `steady_state_second_step`. */
  readonly decode: "steady_state_second_step";
  /** Always `single_step`. */
  readonly prefill: "single_step";
}

/** Real-text pool provenance. */
export interface TextPoolInfo {
  /** npm package. */
  readonly package: string;
  /** Its version. */
  readonly version: string;
  /** sha256 of the dataset files (pinned). */
  readonly sha256: string;
  /** Rule choosing the collection pool (`sha256(body)[0] even`). */
  readonly collection_pool: string;
  /** Bodies in the dataset. */
  readonly bodies: number;
  /** Bodies in the collection pool. */
  readonly collection_bodies: number;
  /** Bodies tokenized into the pool. */
  readonly bodies_used: number;
  /** Tokens in the pool. */
  readonly tokens: number;
  /** The tokenizer used. */
  readonly tokenizer: string;
}

/** How prompts were made. */
export interface SyntheticPrompts {
  /** Content mode actually used. */
  readonly mode: ContentMode;
  /** The model's real vocabulary size. */
  readonly vocab_size: number;
  /** True when random content fell back to zeros (vocab_size <= 1). */
  readonly zeros_fallback: boolean;
  /** Why the mode differs from the one asked for, or null. */
  readonly fallback_reason: string | null;
  /** The real-text pool, in text mode. */
  readonly text: TextPoolInfo | null;
}

/** One kvwarm stage (a rung's chains). */
export interface KvwarmStage {
  /** The rung's batch size. */
  readonly batch: number;
  /** Chain depth, tokens. */
  readonly depth: number;
  /** Seconds the build took. */
  readonly build_seconds: number;
  /** Tokens the build computed. */
  readonly tokens_computed: number;
  /** Tokens it reused from the previous rung's cached blocks. */
  readonly tokens_reused: number;
  /** Whether the stage settled ok. */
  readonly ok: boolean;
  /** Why not, or null. */
  readonly reason: string | null;
  /** Chains of the stage (= batch). */
  readonly chains: number;
  /** Decode points planned on the stage's chains. */
  readonly points: number;
  /** KV blocks the chains were planned to hold (batch x blocks(depth)). */
  readonly blocks: number;
  /** Shadow tail blocks reserved beside them (the largest point's). */
  readonly tail_blocks: number;
  /** Idle engine steps from the stage's start to its settlement. */
  readonly steps: number;
  /**
   * Tokens a step carried at most while the stage built (`--kvwarm-step-tokens`: the chains'
   * prefill is untimed, so it may take larger steps than the measured ones' budget).
   */
  readonly step_tokens: number;
  /** The step (stage round) the stage settled in, or null when it never settled. */
  readonly settle_round: number | null;
}

/** How kvwarm's chains are made. */
export interface KvwarmChains {
  /**
   * `content-v1:{content_seed}:{rank}:{i}`: chain i is the collection pool shuffled by a
   * generator with this seed, its conversations' tokens appended in that order (a chain
   * only extends).
   */
  readonly content_rule: string;
  /** The content seed. */
  readonly content_seed: string;
  /** `__kvwarm_{rank}_{i}`: chain i's stable cache_salt (and request id) on every rung. */
  readonly salt_rule: string;
  /** Conversations (dataset bodies) in the collection pool. */
  readonly conversations: number;
  /** Conversations tokenized for chains so far (the depth probe's included). */
  readonly conversations_tokenized: number;
  /** Tokens they gave. */
  readonly tokens_tokenized: number;
  /** Tokens the depth probe asked of a chain: max_model_len - 4. */
  readonly probe_depth: number;
  /** Seconds the content probe (dataset, tokenizer, depth) took, before any capacity decision. */
  readonly probe_seconds: number;
  /**
   * Seconds the plan's chain content took to tokenize (after the probe, before the first stage;
   * part of what kvwarm adds to a sweep besides the stages' prefill).
   */
  readonly prepare_seconds: number;
}

/** A decode point measured on fake KV while kvwarm was on (`fake_fallback`), and why. */
export interface KvwarmPointFallback {
  /** The point's key. */
  readonly point_key: string;
  /** Its batch. */
  readonly batch: number;
  /** Why: `capacity_fallback`, `chain_depth_capped`, `stage_failed: ...`, ... */
  readonly reason: string;
}

/** Real prefix seeding of prefill KV-read points (`--prefill-real-seed`). */
export interface PrefillRealSeed {
  /** Whether it was asked for (regime `real_prefix` instead of `fake_prefix`). */
  readonly enabled: boolean;
  /** Shots whose prefixes were staged by a real prefill. */
  readonly shots_staged: number;
  /** Untimed same-shape warm shots run. */
  readonly warm_shots: number;
  /** Shots that needed their one re-stage. */
  readonly restages: number;
  /** Shots given up after the re-stage (the point is skipped with the reason). */
  readonly misses: number;
}

/** Real-KV seeding. */
export interface KvwarmSection {
  /** Whether real-KV seeding ran. */
  readonly enabled: boolean;
  /** `--kvwarm` as asked. */
  readonly requested: "on" | "off" | "auto";
  /** Whether the gate let it run. */
  readonly warm_eligible: boolean;
  /** The gate's skip reason (`flag_off`, `not_implemented`, ...), or null. */
  readonly skip_reason: string | null;
  /** Dataset provenance, or null. */
  readonly dataset: TextPoolInfo | null;
  /** Stages. */
  readonly stages: readonly KvwarmStage[];
  /** Points measured on real KV. */
  readonly points_real_kv: number;
  /** Points that fell back to fake KV. */
  readonly points_fake_fallback: number;
  /** Rungs whose chains could not fit. */
  readonly capacity_fallbacks: readonly { readonly batch: number; readonly reason: string }[];
  /** How a shadow's private tail starts (`cow`: a copy of the chain's partial block, `zero_fill`); null when off. */
  readonly shadow_tail: "cow" | "zero_fill" | null;
  /** How stages settle: `local` (one rank) or `group` (attention-DP stage round); null when off. */
  readonly settlement: "local" | "group" | null;
  /** How chains are made; null when the content probe did not pass. */
  readonly chains: KvwarmChains | null;
  /** Every decode point planned or measured on fake KV while kvwarm was on, with its reason. */
  readonly point_fallbacks: readonly KvwarmPointFallback[];
  /** Real prefix seeding of prefill KV-read points. */
  readonly prefill_real_seed: PrefillRealSeed;
}

/** The error that ended a failed run. */
export interface RunError {
  /** `input` (rejected before running), `runtime`, `interrupted`. */
  readonly kind: "input" | "runtime" | "interrupted";
  /** What went wrong. */
  readonly message: string;
  /** The point being measured, or null. */
  readonly benchmark_id: number | null;
  /** Stack trace, or null. */
  readonly stack: string | null;
}

/** One rank's artifact. */
export interface BenchArtifact {
  /** Always 2. */
  readonly schema_version: 2;
  /** complete | partial | failed. */
  readonly status: RunStatus;
  /** No error, and every measured row passed the protocol checks. */
  readonly valid: boolean;
  /** valid, complete, and no point skipped. */
  readonly usable: boolean;
  /** Why it stopped. */
  readonly stop_reason: StopReason;
  /** Unique id of the run. */
  readonly run_id: string;
  /** This rank. */
  readonly rank: number;
  /** Ranks in the run. */
  readonly dp_size: number;
  /** Which points. */
  readonly mode: BenchMode;
  /** sha256 of the ordered, numbered point list; null when no grid was planned. */
  readonly grid_digest: string | null;
  /** Where the points came from (null when the run failed before). */
  readonly points_source: PointsSource | null;
  /** Timing. */
  readonly timing: RunTiming;
  /** Coverage. */
  readonly coverage: Coverage;
  /** Limits. */
  readonly limits: RunLimits;
  /** The envelope points were planned against (null when the run failed before). */
  readonly capacity: BenchCapacity | null;
  /** The engine (null when the run failed before it was built). */
  readonly engine: EngineInfo | null;
  /** How points are measured. */
  readonly measurement_protocol: MeasurementProtocol;
  /** The reference design's policy names. */
  readonly measurement_policy: MeasurementPolicy;
  /** How prompts were made. */
  readonly synthetic_prompts: SyntheticPrompts;
  /** Real-KV seeding. */
  readonly kvwarm: KvwarmSection;
  /** Measured points, in execution order. */
  readonly results: readonly BenchResult[];
  /** Per measured point, the group's iteration walls. */
  readonly iteration_groups: readonly IterationGroup[];
  /** Points skipped with a reason. */
  readonly skipped_points: readonly SkippedPoint[];
  /** The error of a failed run, or the interrupt; null otherwise. */
  readonly error: RunError | null;
  /** Attention data parallelism (null for a run of one rank). */
  readonly attention_dp: AttentionDpSection | null;
}

/** Rounds of one kind, microseconds from entering a round to leaving it with the group's answer. */
export interface DpRoundCost {
  /** Rounds completed. */
  readonly rounds: number;
  /** Mean round, µs. */
  readonly mean_us: number;
  /** Longest round, µs. */
  readonly max_us: number;
  /** All rounds, µs. */
  readonly total_us: number;
}

/**
 * The per-step group barrier on one rank against the steps it ends. A round is the
 * messaging plus the wait for the slowest rank, so a rank that arrives first pays for
 * the others' lateness.
 */
export interface DpStepRound {
  /** Barrier rounds: one per engine step, idle steps included. */
  readonly rounds: number;
  /** Mean round, µs. */
  readonly mean_us: number;
  /** Median round, µs. */
  readonly p50_us: number;
  /** 90th percentile round, µs. */
  readonly p90_us: number;
  /** Longest round, µs. */
  readonly max_us: number;
  /** Mean time from leaving one barrier to entering the next (the step and the benchmark's host work), ms. */
  readonly mean_step_ms: number;
  /** Barrier time / (barrier time + step time). */
  readonly share: number;
}

/** Round durations, microseconds. */
export interface DpRoundStats {
  /** Rounds. */
  readonly rounds: number;
  /** Mean, µs. */
  readonly mean_us: number;
  /** Median, µs. */
  readonly p50_us: number;
  /** 90th percentile, µs. */
  readonly p90_us: number;
  /** Longest, µs. */
  readonly max_us: number;
}

/** A rank's capacity envelope (the min over ranks once negotiated) and its kvwarm eligibility. */
export interface DpCapacity {
  /** KV blocks a point may take. */
  readonly usable_blocks: number;
  /** Longest request. */
  readonly max_model_len: number;
  /** Requests in one step. */
  readonly max_num_seqs: number;
  /** Tokens in one step. */
  readonly max_batched_tokens: number;
  /** Real-KV seeding possible (negotiated: on every rank). */
  readonly kvwarm_eligible: boolean;
  /** Why not (negotiated: `peer_ineligible` when only another rank is not), or null. */
  readonly kvwarm_skip_reason: string | null;
}

/** One kvwarm stage as the group settled it. */
export interface DpStageSettlement {
  /** The rung's batch. */
  readonly batch: number | null;
  /** The group's verdict. */
  readonly ok: boolean | null;
  /** The stage round it settled in. */
  readonly round: number;
}

/** One rank's outcome in a merged view. */
export interface DpRankSummary {
  /** The rank. */
  readonly rank: number;
  /** Its artifact's status. */
  readonly status: RunStatus;
  /** Its stop reason. */
  readonly stop_reason: StopReason;
  /** Points it measured. */
  readonly points_measured: number;
  /** Its error message, or null. */
  readonly error: string | null;
  /** Its per-step barrier cost (null when its artifact has none). */
  readonly step_round: DpStepRound | null;
  /** Its idle barrier rounds (null when its artifact has none). */
  readonly idle_barrier: DpRoundStats | null;
}

/** Attention data parallelism: this rank's place in the group and what lockstep cost. */
export interface AttentionDpSection {
  /** This rank (0 in a merged view). */
  readonly rank: number;
  /** Ranks in the group. */
  readonly size: number;
  /** Where the identity came from: `flags`, `slurm` or `mpi`. */
  readonly source: string;
  /** Rank 0's endpoint, `host:port`. */
  readonly master: string;
  /**
   * How this rank's adapter was chosen (e.g. `DRI_PRIME=pci-0000_18_00_0!`), or null: the
   * default adapter, shared with any other rank on the same host.
   */
  readonly gpu_select: string | null;
  /** Limit on every wait for the group, s. */
  readonly timeout_seconds: number;
  /** How long a wait polls before sleeping 1 ms between polls, ms (0: it always sleeps). */
  readonly spin_ms: number;
  /** What this rank offered (null before the negotiation). */
  readonly envelope: DpCapacity | null;
  /** What the group agreed, which the grid was planned against (null before). */
  readonly negotiated: DpCapacity | null;
  /** The per-step barrier. */
  readonly step_round: DpStepRound;
  /**
   * Back-to-back barrier rounds with no step in between, right after every rank connected:
   * what one round costs by itself (messaging), without the wait for a slower rank.
   */
  readonly idle_barrier: DpRoundStats | null;
  /** Every kind of round, by request type (`hello`, `capacity`, `barrier`, `stage`, ...). */
  readonly rounds: Readonly<Record<string, DpRoundCost>>;
  /** kvwarm stages as the group settled them, in order. */
  readonly stages_settled: readonly DpStageSettlement[];
  /** A merged view: every rank's outcome; null in a rank's own artifact. */
  readonly merged_ranks: readonly DpRankSummary[] | null;
}
