/**
 * Fidelity of a latency library against served traffic: the predictor's absolute
 * percentage error |predicted - served| / served on every served step, summarized as
 * MAPE, p50 and p90, overall and by step kind (prefill, decode, mixed), for the whole
 * library and for each `kv_seed_regime` on its own. Steps outside the library's domain
 * are counted, never scored (the predictor does not extrapolate).
 *
 * Under the interval metric, a step whose arrival interval is shorter than
 * {@link LATE_ARRIVAL_SHARE} of its own GPU time cannot have run in that interval: the
 * previous step's arrival was seen late (the host was busy), which lengthened the previous
 * interval by as much as it shortened this one. Such a step is scored together with the
 * steps before it as one unit (served: the sum of their intervals; predicted: the sum of
 * their predictions), which cancels the late observation exactly; the unit's error counts
 * once for each of its steps, and the report says how many steps were joined. A unit of
 * steps of different kinds is scored under "all" only, by the whole library.
 *
 * ```ts
 * const report = fidelity(rows, log.steps, { metric: "interval", methods: ["grid", "fit"] });
 * report.groups.find((g) => g.regime === "all" && g.kind === "decode")?.mapePct;
 * ```
 */
import type { LibraryRow } from "./latency_library.ts";
import { LatencyPredictor, OutsideDomainError, type PredictMethod } from "./latency_predictor.ts";
import {
  type ServedStep,
  type StepKind,
  stepKind,
  type StepMetric,
  stepTimeMs,
} from "./served_steps.ts";

/** An interval below this share of the step's GPU time marks a late-seen previous arrival. */
export const LATE_ARRIVAL_SHARE = 0.9;

/** One summary line: a regime x method x step kind. */
export interface FidelityGroup {
  /** "all" (every row the filter kept) or one kv_seed_regime. */
  readonly regime: string;
  readonly method: PredictMethod;
  /** "all" or one step kind. */
  readonly kind: StepKind | "all";
  /** Served steps of this kind. */
  readonly steps: number;
  /** Steps scored (inside the library's domain; a coalesced unit counts all its steps). */
  readonly scored: number;
  /** Steps outside the domain. */
  readonly outside: number;
  /** Mean absolute percentage error, %; null when nothing was scored. */
  readonly mapePct: number | null;
  readonly p50Pct: number | null;
  readonly p90Pct: number | null;
  /** Mean signed error, % (positive: the library predicts slower than served). */
  readonly biasPct: number | null;
}

/** The whole fidelity report. */
export interface FidelityReport {
  readonly metric: StepMetric;
  readonly steps: number;
  /** Steps without a time under the metric (gpu_ms null, or a zero interval that follows
   * an untimed step), never scored. */
  readonly untimed: number;
  /**
   * Steps scored together with the step before them, because the previous arrival was seen
   * late (interval metric only; see the module doc).
   */
  readonly coalesced: number;
  readonly groups: readonly FidelityGroup[];
  /** A few reasons steps fell outside the domain, with counts. */
  readonly outsideReasons: readonly { readonly reason: string; readonly count: number }[];
}

/** Options of `fidelity`. */
export interface FidelityOptions {
  readonly metric?: StepMetric;
  readonly methods?: readonly PredictMethod[];
  /** Keep only these regimes for the "all" predictor (default: every regime). */
  readonly regimes?: readonly string[];
  /** Skip the first N steps (warm-up of the served engine; default 0). */
  readonly skipSteps?: number;
}

/** Scores every served step; see the module doc. */
export function fidelity(
  rows: readonly LibraryRow[],
  steps: readonly ServedStep[],
  options: FidelityOptions = {},
): FidelityReport {
  const metric = options.metric ?? "interval";
  const methods = options.methods ?? ["grid", "fit"];
  const kept = steps.slice(options.skipSteps ?? 0);
  const { units, untimed } = scoringUnits(kept, metric);
  const groups: FidelityGroup[] = [];
  const reasons = new Map<string, number>();
  const all = new LatencyPredictor(rows, { regimes: options.regimes });
  // A unit whose steps differ in kind (a late step joined to another kind) is scored by the
  // whole library only, under "all".
  const predictors: [string, LatencyPredictor, (k: StepKind | null) => boolean][] = [
    ["all", all, () => true],
  ];
  for (const regime of all.regimes("decode")) {
    const prefill = all.rows.filter((r) => r.kind === "prefill").map((r) => r.regime);
    predictors.push([
      regime,
      new LatencyPredictor(all.rows, { regimes: [regime, ...new Set(prefill)] }),
      (k) => k === "decode",
    ]);
  }
  for (const regime of all.regimes("prefill")) {
    const decode = all.rows.filter((r) => r.kind === "decode").map((r) => r.regime);
    predictors.push([
      regime,
      new LatencyPredictor(all.rows, { regimes: [regime, ...new Set(decode)] }),
      (k) => k !== null && k !== "decode",
    ]);
  }
  for (const [regime, predictor, applies] of predictors) {
    for (const method of methods) {
      const errors = new Map<
        StepKind | "all",
        { ape: number[]; signed: number[]; outside: number; steps: number }
      >();
      const bucket = (k: StepKind | "all") => {
        let b = errors.get(k);
        if (!b) errors.set(k, b = { ape: [], signed: [], outside: 0, steps: 0 });
        return b;
      };
      for (const unit of units) {
        const kind = unitKind(unit);
        if (!applies(kind)) continue;
        const targets = kind === null ? [bucket("all")] : [bucket(kind), bucket("all")];
        for (const t of targets) t.steps += unit.length;
        let predicted = 0;
        try {
          for (const s of unit) predicted += predictor.step(s, method).wallMs;
        } catch (err) {
          if (!(err instanceof OutsideDomainError)) throw err;
          for (const t of targets) t.outside += unit.length;
          if (regime === "all") {
            const reason = `${method} ${kind ?? "joined"}: ${generalize(err.message)}`;
            reasons.set(reason, (reasons.get(reason) ?? 0) + unit.length);
          }
          continue;
        }
        let served = 0;
        for (const s of unit) served += stepTimeMs(s, metric)!;
        const signed = (100 * (predicted - served)) / served;
        // The unit's error stands for each of its steps (quantiles and means are per step).
        for (const t of targets) {
          for (let i = 0; i < unit.length; i++) {
            t.ape.push(Math.abs(signed));
            t.signed.push(signed);
          }
        }
      }
      const kinds: (StepKind | "all")[] = ["all", "prefill", "decode", "mixed"];
      for (const kind of kinds) {
        const b = errors.get(kind);
        if (!b) continue;
        groups.push({
          regime,
          method,
          kind,
          steps: b.steps,
          scored: b.ape.length,
          outside: b.outside,
          mapePct: b.ape.length ? mean(b.ape) : null,
          p50Pct: b.ape.length ? quantile(b.ape, 0.5) : null,
          p90Pct: b.ape.length ? quantile(b.ape, 0.9) : null,
          biasPct: b.signed.length ? mean(b.signed) : null,
        });
      }
    }
  }
  return {
    metric,
    steps: kept.length,
    untimed,
    coalesced: units.reduce((n, u) => n + u.length - 1, 0),
    groups,
    outsideReasons: [...reasons].map(([reason, count]) => ({ reason, count }))
      .sort((a, b) => b.count - a.count).slice(0, 8),
  };
}

/**
 * The steps in scoring units, and how many steps have no time under the metric: one step a
 * unit, except that under the interval metric a step whose interval is below
 * LATE_ARRIVAL_SHARE of its GPU time (zero included) joins the unit of the step just before
 * it in the log (never across an untimed step).
 */
function scoringUnits(
  steps: readonly ServedStep[],
  metric: StepMetric,
): { units: ServedStep[][]; untimed: number } {
  const units: ServedStep[][] = [];
  let untimed = 0;
  let joinable = false; // the previous step of the log ended the last unit
  for (const s of steps) {
    const time = stepTimeMs(s, metric);
    const late = metric === "interval" && s.gpu_ms !== null && time !== null && time >= 0 &&
      time < LATE_ARRIVAL_SHARE * s.gpu_ms;
    if (late && joinable) {
      units[units.length - 1].push(s);
    } else if (time !== null && time > 0) {
      units.push([s]);
      joinable = true;
    } else {
      untimed++;
      joinable = false;
    }
  }
  return { units, untimed };
}

/** A unit's kind: its steps' kind when they agree, else null (scored under "all" only). */
function unitKind(unit: readonly ServedStep[]): StepKind | null {
  const kinds = new Set(unit.map(stepKind));
  return kinds.size === 1 ? [...kinds][0] : null;
}

/** Linear-interpolated quantile (q in [0, 1]) of unsorted values. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) throw new Error("quantile of nothing");
  const s = [...values].sort((a, b) => a - b);
  const pos = q * (s.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo] + (pos - lo) * (s[hi] - s[lo]);
}

function mean(values: readonly number[]): number {
  return values.reduce((s, v) => s + v, 0) / values.length;
}

/** A domain message with its numbers dropped, so like reasons count together. */
function generalize(message: string): string {
  return message.replace(/^[^:]*: /, "").replace(/-?\d+(\.\d+)?/g, "N");
}
