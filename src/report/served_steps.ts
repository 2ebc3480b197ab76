/**
 * The step log of served traffic (what `replay` writes, what `fidelity` reads): JSON
 * Lines, one `replay_header` line, one `step` line per engine step, one `replay_summary`
 * line at the end.
 *
 * A step line carries the step's shape (the engine's StepObservation sums, snake_case)
 * and its times:
 * - `wall_ms`: end of schedule -> output arrival (the benchmark's single-step metric);
 * - `interval_ms`: output arrival - max(end of schedule, previous step's arrival): the
 *   time the step itself occupied the pipeline; equal to `wall_ms` when the engine
 *   waited for the previous step before scheduling (synchronous mode, or an idle GPU),
 *   and the gap between consecutive arrivals when steps were back to back (the
 *   benchmark's steady-decode metric in async mode);
 * - `gpu_ms`: timestamp-query GPU time (null without timestamps).
 *
 * ```ts
 * const log = parseServedSteps(readFileSync("steps.jsonl", "utf8"), "steps.jsonl");
 * log.steps.filter((s) => stepKind(s) === "decode");
 * ```
 */

/** Schema version of the step log. */
export const SERVED_STEPS_SCHEMA_VERSION = 1;

/** One served step. */
export interface ServedStep {
  readonly kind: "step";
  readonly step_id: number;
  readonly num_requests: number;
  readonly num_scheduled_tokens: number;
  readonly num_prefill_requests: number;
  readonly sum_prefill_tokens: number;
  readonly sum_prefill_kv_tokens: number;
  readonly num_decode_requests: number;
  readonly sum_decode_kv_tokens: number;
  readonly num_preempted: number;
  readonly num_block_copies: number;
  /** End of schedule, ms after the replay started. */
  readonly t_ms: number;
  readonly wall_ms: number;
  readonly interval_ms: number;
  readonly gpu_ms: number | null;
}

/** First line of a step log: what was served, on what. */
export interface ReplayHeader {
  readonly kind: "replay_header";
  readonly schema_version: typeof SERVED_STEPS_SCHEMA_VERSION;
  readonly model: string;
  readonly trace: { readonly path: string; readonly sha256: string; readonly requests: number };
  readonly engine: Readonly<Record<string, unknown>>;
  readonly gpu: string;
  readonly started_at: string;
}

/** Last line: how the replay went. */
export interface ReplaySummary {
  readonly kind: "replay_summary";
  readonly requests: number;
  readonly finished: Readonly<Record<string, number>>;
  readonly steps: number;
  readonly elapsed_s: number;
  /** Prompts whose re-tokenized length differed from the trace's `prompt_tokens`. */
  readonly prompt_length_mismatches: number;
}

/** A parsed step log (the summary is null for a replay that did not finish). */
export interface ServedStepLog {
  readonly header: ReplayHeader;
  readonly steps: readonly ServedStep[];
  readonly summary: ReplaySummary | null;
}

/** The kind of a step: only prefill requests, only decodes, or both. */
export type StepKind = "prefill" | "decode" | "mixed";

/** Prefill, decode or mixed, from the step's request counts. */
export function stepKind(step: ServedStep): StepKind {
  if (step.num_decode_requests === 0) return "prefill";
  return step.num_prefill_requests === 0 ? "decode" : "mixed";
}

/** Which time of a step to compare with a prediction. */
export type StepMetric = "interval" | "wall" | "gpu";

/** The step's time in ms under `metric` (null for gpu without timestamps). */
export function stepTimeMs(step: ServedStep, metric: StepMetric): number | null {
  return metric === "wall" ? step.wall_ms : metric === "interval" ? step.interval_ms : step.gpu_ms;
}

const INT_FIELDS = [
  "step_id",
  "num_requests",
  "num_scheduled_tokens",
  "num_prefill_requests",
  "sum_prefill_tokens",
  "sum_prefill_kv_tokens",
  "num_decode_requests",
  "sum_decode_kv_tokens",
  "num_preempted",
  "num_block_copies",
] as const;

/** One JSON line. */
export function formatStepLine(line: ReplayHeader | ServedStep | ReplaySummary): string {
  return JSON.stringify(line) + "\n";
}

/** Parses a step log; throws naming the file, line and field for anything malformed. */
export function parseServedSteps(text: string, name = "steps"): ServedStepLog {
  const lines = text.split("\n").map((l, i) => [l.trim(), i + 1] as const).filter(([l]) => l);
  let header: ReplayHeader | null = null;
  let summary: ReplaySummary | null = null;
  const steps: ServedStep[] = [];
  for (const [line, n] of lines) {
    let obj: Record<string, unknown>;
    try {
      obj = JSON.parse(line);
    } catch (err) {
      throw new Error(`${name}:${n}: not JSON: ${(err as Error).message}`);
    }
    if (n === lines[0][1]) {
      if (obj.kind !== "replay_header") {
        throw new Error(`${name}:${n}: the first line must be the replay_header`);
      }
      if (obj.schema_version !== SERVED_STEPS_SCHEMA_VERSION) {
        throw new Error(
          `${name}:${n}: schema_version ${obj.schema_version}, this reader takes ${SERVED_STEPS_SCHEMA_VERSION}`,
        );
      }
      header = obj as unknown as ReplayHeader;
      continue;
    }
    if (summary) throw new Error(`${name}:${n}: a line after the replay_summary`);
    if (obj.kind === "replay_summary") {
      summary = obj as unknown as ReplaySummary;
      continue;
    }
    if (obj.kind !== "step") throw new Error(`${name}:${n}: unknown line kind "${obj.kind}"`);
    for (const f of INT_FIELDS) {
      const v = obj[f];
      if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
        throw new Error(`${name}:${n}: ${f} must be an integer >= 0, got ${JSON.stringify(v)}`);
      }
    }
    for (const f of ["t_ms", "wall_ms", "interval_ms"]) {
      const v = obj[f];
      if (typeof v !== "number" || !(v >= 0)) {
        throw new Error(`${name}:${n}: ${f} must be a number >= 0, got ${JSON.stringify(v)}`);
      }
    }
    if (obj.gpu_ms !== null && !(typeof obj.gpu_ms === "number" && obj.gpu_ms >= 0)) {
      throw new Error(`${name}:${n}: gpu_ms must be a number >= 0 or null`);
    }
    const s = obj as unknown as ServedStep;
    if (s.num_prefill_requests + s.num_decode_requests !== s.num_requests) {
      throw new Error(`${name}:${n}: prefill + decode requests != num_requests`);
    }
    if (s.num_requests < 1 || s.num_scheduled_tokens < 1) {
      throw new Error(`${name}:${n}: a step needs at least one request and one scheduled token`);
    }
    if (s.sum_decode_kv_tokens < s.num_decode_requests) {
      throw new Error(`${name}:${n}: sum_decode_kv_tokens < num_decode_requests`);
    }
    steps.push(s);
  }
  if (!header) throw new Error(`${name}: empty step log`);
  return { header, steps, summary };
}
