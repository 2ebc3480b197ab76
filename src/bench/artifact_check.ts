/**
 * A run-time check that a JSON value is a {@link BenchArtifact}: every field of the
 * types in artifact.ts, of the right type, and nothing else, plus the invariants a
 * reader relies on (benchmark ids 1..N in execution order over results and skipped
 * points, balanced KV pools, an estimate that names a real sample, status and
 * validity consistent). Each shape below is typed `Shape<T>`, so the compiler refuses
 * a shape that misses or invents a field of its type.
 *
 * ```ts
 * const problems = checkArtifact(JSON.parse(text));
 * if (problems.length) throw new Error(problems.join("\n"));
 * ```
 */
import type {
  AdapterInfo,
  AdmissionStep,
  AttentionDpSection,
  BenchArtifact,
  BenchCapacity,
  BenchmarkMeasurement,
  BenchResult,
  ClockWarmupRecord,
  Coverage,
  DpCapacity,
  DpRankSummary,
  DpRoundStats,
  DpStepRound,
  EngineInfo,
  Estimate,
  Fpm,
  GcPolicy,
  GridLimits,
  IterationGroup,
  KvPoolBalance,
  KvwarmChains,
  KvwarmPointFallback,
  KvwarmSection,
  KvwarmStage,
  MeasuredSample,
  MeasurementProtocol,
  PrefillRealSeed,
  Preparation,
  PromptRecord,
  RunError,
  RunLimits,
  RunTiming,
  SkippedPoint,
  SyntheticPrompts,
  TextPoolInfo,
  WarmupRecord,
} from "./artifact.ts";
import { isDecodeRegime, isKvSeedRegime, isPrefillRegime } from "./kvwarm/regime.ts";

/** Checks one value; returns a problem (without the path) or null. */
type Check = (v: unknown, path: string, out: string[]) => void;

/** A check per field of T, no more, no fewer. */
type Shape<T> = { readonly [K in keyof T]-?: Check };

const typeName = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

const num: Check = (v, p, out) => {
  if (typeof v !== "number" || !Number.isFinite(v)) {
    out.push(`${p}: a finite number, got ${typeName(v)}`);
  }
};
const nonNeg: Check = (v, p, out) => {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
    out.push(`${p}: a non-negative number, got ${JSON.stringify(v)}`);
  }
};
const int: Check = (v, p, out) => {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    out.push(`${p}: a non-negative integer, got ${JSON.stringify(v)}`);
  }
};
const str: Check = (v, p, out) => {
  if (typeof v !== "string") out.push(`${p}: a string, got ${typeName(v)}`);
};
const bool: Check = (v, p, out) => {
  if (typeof v !== "boolean") out.push(`${p}: a boolean, got ${typeName(v)}`);
};
const oneOf = (...values: readonly unknown[]): Check => (v, p, out) => {
  if (!values.includes(v)) out.push(`${p}: one of ${values.join(", ")}, got ${JSON.stringify(v)}`);
};
const nullable = (c: Check): Check => (v, p, out) => {
  if (v !== null) c(v, p, out);
};
/** A field that older artifacts of the same schema version lack. */
const absentOr = (c: Check): Check => (v, p, out) => {
  if (v !== undefined) c(v, p, out);
};
const arr = (c: Check): Check => (v, p, out) => {
  if (!Array.isArray(v)) {
    out.push(`${p}: an array, got ${typeName(v)}`);
    return;
  }
  v.forEach((x, i) => c(x, `${p}[${i}]`, out));
};
const record = (c: Check): Check => (v, p, out) => {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    out.push(`${p}: an object, got ${typeName(v)}`);
    return;
  }
  for (const [k, x] of Object.entries(v)) c(x, `${p}.${k}`, out);
};
function obj<T>(shape: Shape<T>): Check {
  return (v, p, out) => {
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
      out.push(`${p}: an object, got ${typeName(v)}`);
      return;
    }
    const o = v as Record<string, unknown>;
    for (const [k, c] of Object.entries(shape) as [string, Check][]) {
      if (!(k in o)) out.push(`${p}.${k}: missing`);
      else c(o[k], `${p}.${k}`, out);
    }
    for (const k of Object.keys(o)) if (!(k in shape)) out.push(`${p}.${k}: not in the schema`);
  };
}

const regime: Check = (v, p, out) => {
  if (!isKvSeedRegime(v)) out.push(`${p}: a kv_seed_regime, got ${JSON.stringify(v)}`);
};

const point: Check = (v, p, out) => {
  const kind = (v as { kind?: unknown } | null)?.kind;
  if (kind === "prefill") {
    obj({ kind: str, batch_size: int, total_prefill_tokens: int, total_kv_read_tokens: int })(
      v,
      p,
      out,
    );
  } else if (kind === "decode") {
    obj({ kind: str, batch_size: int, total_kv_read_tokens: int })(v, p, out);
  } else out.push(`${p}.kind: prefill or decode, got ${JSON.stringify(kind)}`);
};

const SUMS = {
  num_requests: int,
  num_scheduled_tokens: int,
  num_prefill_requests: int,
  sum_prefill_tokens: int,
  sum_prefill_kv_tokens: int,
  num_decode_requests: int,
  sum_decode_kv_tokens: int,
  num_preempted: int,
  num_block_copies: int,
};

const SAMPLE: Shape<MeasuredSample> = {
  ...SUMS,
  index: int,
  step_id: int,
  wall_time: nonNeg,
  schedule_to_output_time: nonNeg,
  gpu_time: nullable(nonNeg),
};
const ADMISSION: Shape<AdmissionStep> = {
  ...SUMS,
  step_id: int,
  schedule_to_output_time: nonNeg,
  gpu_time: nullable(nonNeg),
};
const PROMPT: Shape<PromptRecord> = {
  slot: int,
  shot: int,
  request_id: str,
  cache_salt: str,
  content_salt: nullable(str),
  prompt_tokens: int,
  computed_tokens: int,
  sha256: (v, p, out) => {
    if (typeof v !== "string" || !/^[0-9a-f]{64}$/.test(v)) out.push(`${p}: a sha256 hex digest`);
  },
};
const PREPARATION: Shape<Preparation> = {
  method: str,
  seconds: nonNeg,
  blocks: int,
  prefix_hit_tokens: int,
  replica: bool,
  shape_key: str,
  replica_seconds: nonNeg,
};
const ESTIMATE: Shape<Estimate> = {
  method: oneOf("single_sample", "upper_median"),
  median_of: int,
  sample_indices: arr(int),
  wall_time: nonNeg,
  gpu_time: nullable(nonNeg),
};
const MEASUREMENT: Shape<BenchmarkMeasurement> = {
  benchmark_id: int,
  point_key: str,
  kind: oneOf("prefill", "decode"),
  prompts: arr(obj(PROMPT)),
  preparation: obj(PREPARATION),
  admission: nullable(obj(ADMISSION)),
  samples: arr(obj(SAMPLE)),
  estimate: obj(ESTIMATE),
};
const FPM: Shape<Fpm> = {
  ...SUMS,
  rank: int,
  wall_time: nonNeg,
  gpu_time: nullable(nonNeg),
  benchmark_measurement: obj(MEASUREMENT),
};
const KV_POOL: Shape<KvPoolBalance> = {
  blocks_total: int,
  blocks_free_before: int,
  blocks_free_after: int,
};
const RESULT: Shape<BenchResult> = {
  benchmark_id: int,
  point,
  point_key: str,
  kv_seed_regime: regime,
  repeats: int,
  kv_pool: obj(KV_POOL),
  fpms: arr(obj(FPM)),
};
const SKIPPED: Shape<SkippedPoint> = {
  benchmark_id: int,
  point,
  point_key: str,
  kv_seed_regime: regime,
  reason: str,
};
const GROUP: Shape<IterationGroup> = {
  benchmark_id: int,
  point_key: str,
  ranks: int,
  iteration_walls: arr(nonNeg),
  wall_time: nonNeg,
};
const TIMING: Shape<RunTiming> = {
  started_at: str,
  finished_at: str,
  elapsed: nonNeg,
  setup_seconds: nonNeg,
  warmup_seconds: nonNeg,
  measured_iteration_seconds: nonNeg,
  outside_measured_share: num,
  points_per_minute: nonNeg,
};
const KIND_COUNTS = obj({ planned: int, measured: int, skipped: int });
const COVERAGE: Shape<Coverage> = {
  points_planned: int,
  points_measured: int,
  points_skipped: int,
  points_not_run: int,
  generated_infeasible: int,
  by_kind: obj({ prefill: KIND_COUNTS, decode: KIND_COUNTS }),
  regimes: record(int),
};
const GRID_LIMITS: Shape<GridLimits> = {
  decode_batch_samples: int,
  decode_kv_samples: int,
  prefill_token_samples: int,
  prefill_batch_sizes: int,
  prefill_kv_read_samples: int,
};
const pointsSource: Check = (v, p, out) => {
  const kind = (v as { kind?: unknown } | null)?.kind;
  if (kind === "manifest") obj({ kind: str, path: str, sha256: str })(v, p, out);
  else if (kind === "generated") {
    obj({ kind: str, preset: str, limits: obj(GRID_LIMITS) })(v, p, out);
  } else out.push(`${p}.kind: manifest or generated, got ${JSON.stringify(kind)}`);
};
const LIMITS: Shape<RunLimits> = {
  soft_timeout_seconds: nullable(nonNeg),
  repeats: int,
  giant_kv_threshold: int,
  checkpoint_every_points: int,
};
const CAPACITY: Shape<BenchCapacity> = {
  block_size: int,
  blocks_total: int,
  watermark_blocks: int,
  usable_blocks: int,
  max_model_len: int,
  max_num_seqs: int,
  max_batched_tokens: int,
  prefix_caching: bool,
};
const ADAPTER: Shape<AdapterInfo> = {
  description: str,
  vendor: str,
  architecture: str,
  type: str,
  backend: str,
  driver: str,
  timestamps: bool,
  f16: bool,
};
const ENGINE: Shape<EngineInfo> = {
  model: str,
  architecture: str,
  moe: bool,
  num_layers: int,
  hidden_size: int,
  num_experts: int,
  experts_per_token: int,
  vocab_size: int,
  dtype: str,
  num_blocks: int,
  async_scheduling: bool,
  adapter: nullable(obj(ADAPTER)),
  runtime: str,
  webfpm_version: str,
};
const GC: Shape<GcPolicy> = {
  policy: oneOf("point_boundary"),
  exposed: bool,
  collections: int,
  seconds: nonNeg,
};
const CLOCK_WARMUP: Shape<ClockWarmupRecord> = {
  min_seconds: nonNeg,
  prompt_tokens: int,
  requests: int,
  steps: int,
  seconds: nonNeg,
  counted_seconds: absentOr(nonNeg),
  ended: absentOr(oneOf("time", "pool", "stop")),
};
const WARMUP: Shape<WarmupRecord> = {
  prompt_tokens: int,
  steps: int,
  seconds: nonNeg,
  clock: nullable(obj(CLOCK_WARMUP)),
};
const PROTOCOL: Shape<MeasurementProtocol> = {
  content_identity: str,
  content_seed: str,
  synthetic_content: bool,
  timing_metric: str,
  steady_timing: str,
  gpu_timing: str,
  unobserved: arr(str),
  preparation: obj({
    decode: str,
    prefill_kv_read: str,
    replica: str,
    shape_key: str,
    warmup: nullable(obj(WARMUP)),
  }),
  median: obj({ method: str, repeats: int, giant_kv_threshold: int, applies_to: arr(str) }),
  gc: obj(GC),
  async_scheduling: bool,
};
const TEXT_POOL: Shape<TextPoolInfo> = {
  package: str,
  version: str,
  sha256: str,
  collection_pool: str,
  bodies: int,
  collection_bodies: int,
  bodies_used: int,
  tokens: int,
  tokenizer: str,
};
const PROMPTS: Shape<SyntheticPrompts> = {
  mode: oneOf("random", "text", "zeros"),
  vocab_size: int,
  zeros_fallback: bool,
  fallback_reason: nullable(str),
  text: nullable(obj(TEXT_POOL)),
};
const STAGE: Shape<KvwarmStage> = {
  batch: int,
  depth: int,
  build_seconds: nonNeg,
  tokens_computed: int,
  tokens_reused: int,
  ok: bool,
  reason: nullable(str),
  chains: int,
  points: int,
  blocks: int,
  tail_blocks: int,
  steps: int,
  step_tokens: int,
  settle_round: nullable(int),
};
const CHAINS: Shape<KvwarmChains> = {
  content_rule: str,
  content_seed: str,
  salt_rule: str,
  conversations: int,
  conversations_tokenized: int,
  tokens_tokenized: int,
  probe_depth: int,
  probe_seconds: nonNeg,
  prepare_seconds: nonNeg,
};
const POINT_FALLBACK: Shape<KvwarmPointFallback> = { point_key: str, batch: int, reason: str };
const PREFILL_REAL_SEED: Shape<PrefillRealSeed> = {
  enabled: bool,
  shots_staged: int,
  warm_shots: int,
  restages: int,
  misses: int,
};
const KVWARM: Shape<KvwarmSection> = {
  enabled: bool,
  requested: oneOf("on", "off", "auto"),
  warm_eligible: bool,
  skip_reason: nullable(str),
  dataset: nullable(obj(TEXT_POOL)),
  stages: arr(obj(STAGE)),
  points_real_kv: int,
  points_fake_fallback: int,
  capacity_fallbacks: arr(obj({ batch: int, reason: str })),
  shadow_tail: nullable(oneOf("cow", "zero_fill")),
  settlement: nullable(oneOf("local", "group")),
  chains: nullable(obj(CHAINS)),
  point_fallbacks: arr(obj(POINT_FALLBACK)),
  prefill_real_seed: obj(PREFILL_REAL_SEED),
};
const ERROR: Shape<RunError> = {
  kind: oneOf("input", "runtime", "interrupted"),
  message: str,
  benchmark_id: nullable(int),
  stack: nullable(str),
};
const STEP_ROUND: Shape<DpStepRound> = {
  rounds: int,
  mean_us: nonNeg,
  p50_us: nonNeg,
  p90_us: nonNeg,
  max_us: nonNeg,
  mean_step_ms: nonNeg,
  share: nonNeg,
};
const ROUND_STATS: Shape<DpRoundStats> = {
  rounds: int,
  mean_us: nonNeg,
  p50_us: nonNeg,
  p90_us: nonNeg,
  max_us: nonNeg,
};
const DP_CAPACITY: Shape<DpCapacity> = {
  usable_blocks: int,
  max_model_len: int,
  max_num_seqs: int,
  max_batched_tokens: int,
  kvwarm_eligible: bool,
  kvwarm_skip_reason: nullable(str),
};
const DP_RANK: Shape<DpRankSummary> = {
  rank: int,
  status: oneOf("complete", "partial", "failed"),
  stop_reason: str,
  points_measured: int,
  error: nullable(str),
  step_round: nullable(obj(STEP_ROUND)),
  idle_barrier: nullable(obj(ROUND_STATS)),
};
const ATTENTION_DP: Shape<AttentionDpSection> = {
  rank: int,
  size: int,
  source: str,
  master: str,
  gpu_select: nullable(str),
  timeout_seconds: nonNeg,
  spin_ms: nonNeg,
  envelope: nullable(obj(DP_CAPACITY)),
  negotiated: nullable(obj(DP_CAPACITY)),
  step_round: obj(STEP_ROUND),
  idle_barrier: nullable(obj(ROUND_STATS)),
  rounds: record(obj({ rounds: int, mean_us: nonNeg, max_us: nonNeg, total_us: nonNeg })),
  stages_settled: arr(obj({ batch: nullable(int), ok: nullable(bool), round: int })),
  merged_ranks: nullable(arr(obj(DP_RANK))),
};
const ARTIFACT: Shape<BenchArtifact> = {
  schema_version: oneOf(2),
  status: oneOf("complete", "partial", "failed"),
  valid: bool,
  usable: bool,
  stop_reason: oneOf(
    "complete",
    "soft_timeout",
    "interrupted",
    "error",
    "input_error",
    "checkpoint",
  ),
  run_id: str,
  rank: int,
  dp_size: int,
  mode: oneOf("prefill", "decode", "agg"),
  grid_digest: nullable(str),
  points_source: nullable(pointsSource),
  timing: obj(TIMING),
  coverage: obj(COVERAGE),
  limits: obj(LIMITS),
  capacity: nullable(obj(CAPACITY)),
  engine: nullable(obj(ENGINE)),
  measurement_protocol: obj(PROTOCOL),
  measurement_policy: obj({
    decode: oneOf("steady_state_second_step"),
    prefill: oneOf("single_step"),
  }),
  synthetic_prompts: obj(PROMPTS),
  kvwarm: obj(KVWARM),
  results: arr(obj(RESULT)),
  iteration_groups: arr(obj(GROUP)),
  skipped_points: arr(obj(SKIPPED)),
  error: nullable(obj(ERROR)),
  attention_dp: nullable(obj(ATTENTION_DP)),
};

/** Every way `value` differs from a {@link BenchArtifact}; empty when it is one. */
export function checkArtifact(value: unknown): string[] {
  const out: string[] = [];
  obj(ARTIFACT)(value, "artifact", out);
  if (out.length > 0) return out;
  const a = value as BenchArtifact;
  const ids = [
    ...a.results.map((r) => r.benchmark_id),
    ...a.skipped_points.map((s) => s.benchmark_id),
  ].sort((x, y) => x - y);
  if (ids.some((id, i) => id !== i + 1)) {
    out.push(`benchmark ids of results and skipped points are not 1..N: ${ids.join(",")}`);
  }
  const resultIds = a.results.map((r) => r.benchmark_id);
  if (resultIds.some((id, i) => i > 0 && id <= resultIds[i - 1])) {
    out.push("results are not in execution order");
  }
  for (const r of [...a.results, ...a.skipped_points]) {
    const at = `benchmark_id=${r.benchmark_id}`;
    const fits = r.point.kind === "decode"
      ? isDecodeRegime(r.kv_seed_regime)
      : isPrefillRegime(r.kv_seed_regime);
    if (!fits) out.push(`${at}: ${r.point.kind} point with regime ${r.kv_seed_regime}`);
    if (r.kv_seed_regime === "real_kv" && !a.kvwarm.enabled) {
      out.push(`${at}: real_kv while kvwarm is not enabled`);
    }
    if (r.kv_seed_regime === "real_prefix" && !a.kvwarm.prefill_real_seed.enabled) {
      out.push(`${at}: real_prefix while prefill real seeding is not enabled`);
    }
  }
  for (const r of a.results) {
    const at = `results[benchmark_id=${r.benchmark_id}]`;
    if (r.kv_pool.blocks_free_before !== r.kv_pool.blocks_free_after) {
      out.push(`${at}.kv_pool does not balance`);
    }
    if (r.fpms.length === 0) out.push(`${at}.fpms is empty`);
    for (const f of r.fpms) {
      const m = f.benchmark_measurement;
      if (m.benchmark_id !== r.benchmark_id || m.point_key !== r.point_key) {
        out.push(`${at}: benchmark_measurement names another point`);
      }
      if (m.samples.length !== r.repeats) {
        out.push(`${at}: ${m.samples.length} samples, repeats ${r.repeats}`);
      }
      const chosen = m.samples[m.estimate.sample_indices[0]];
      if (
        !chosen || chosen.wall_time !== f.wall_time || m.estimate.median_of !== m.samples.length
      ) {
        out.push(`${at}: the estimate does not name one of its samples`);
      }
    }
  }
  if (a.valid !== (a.status !== "failed")) out.push("valid must be true exactly when not failed");
  if (a.usable && (!a.valid || a.status !== "complete" || a.skipped_points.length > 0)) {
    out.push("usable needs a valid, complete run without skipped points");
  }
  if ((a.status === "failed") !== (a.error !== null && a.error.kind !== "interrupted")) {
    out.push("a failed run (and only a failed run) carries a non-interrupt error");
  }
  return out;
}
