/**
 * Predicts a step's wall time from a latency library, the two ways planners use one:
 *
 * - `fit`: planner-style linear fits with non-negative coefficients (NNLS):
 *   prefill `wall = c0 + c1 * tokens`; decode `wall = c0 + c1 * requests + c2 * kv_tokens`.
 * - `grid`: interpolation of the measured grid. Decode: bilinear over (batch, KV tokens
 *   per request), along each batch's KV ladder and then between the two bracketing
 *   batches. Prefill: linear in tokens along the slice of the query's KV-read total,
 *   between the two bracketing KV slices when it falls between them.
 *
 * Neither extrapolates: a query outside the collected domain (the coordinate ranges for
 * `fit`: batch and KV for decode, tokens for prefill, whose planner-style fit has no KV
 * term; the bracketing ladders for `grid`) throws `OutsideDomainError` saying which
 * coordinate is out and the collected range. Rows are filtered by `kv_seed_regime`.
 *
 * A served step maps onto the library by its scheduled sums: decode-only steps are
 * decode points; prefill-only and mixed steps are prefill points whose tokens are all
 * the step's tokens and whose KV read is all the KV the step reads (a decode in a mixed
 * step is a one-token query through the same kernels).
 *
 * ```ts
 * const p = LatencyPredictor.fromArtifacts([readArtifact("bench.json")], { regimes: ["real_kv"] });
 * p.decode(8, 16384, "grid").wallMs;
 * p.prefill(2048, { kv: 0 }, "fit").wallMs;
 * ```
 */
import type { BenchArtifact } from "../bench/artifact.ts";
import { LadderGrid } from "./ladder_interpolation.ts";
import { type LibraryRow, libraryRows } from "./latency_library.ts";
import { nnls } from "./nnls.ts";

/** How to predict. */
export type PredictMethod = "grid" | "fit";

/** A query outside the collected domain. */
export class OutsideDomainError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "OutsideDomainError";
  }
}

/** A prediction. */
export interface Prediction {
  readonly wallMs: number;
  readonly method: PredictMethod;
  readonly kind: "prefill" | "decode";
}

/** A fitted linear model: coefficients in ms per unit, and its fit quality. */
export interface LinearFit {
  /** Names of the terms, "1" for the intercept. */
  readonly terms: readonly string[];
  readonly coefficients: readonly number[];
  /** Rows fitted. */
  readonly n: number;
  /** Root-mean-square residual, ms. */
  readonly rmseMs: number;
  /** Mean absolute percentage error on the rows it was fitted to. */
  readonly mapePct: number;
}

/** The shape of a served step (the engine's scheduled sums, snake_case). */
export interface StepSumsLike {
  readonly num_requests: number;
  readonly num_scheduled_tokens: number;
  readonly num_prefill_requests: number;
  readonly sum_prefill_tokens: number;
  readonly sum_prefill_kv_tokens: number;
  readonly num_decode_requests: number;
  readonly sum_decode_kv_tokens: number;
}

/** Options of the predictor. */
export interface PredictorOptions {
  /** Keep only rows whose kv_seed_regime is listed (default: every measured regime). */
  readonly regimes?: readonly string[];
}

type Range = readonly [number, number];

/** See the module doc. */
export class LatencyPredictor {
  /** The rows after the regime filter. */
  readonly rows: readonly LibraryRow[];
  readonly decodeFit: LinearFit | null;
  readonly prefillFit: LinearFit | null;
  private readonly decodeGrid: LadderGrid;
  private readonly decodeRange: { batch: Range; kv: Range } | null;
  private readonly prefillRange: { tokens: Range } | null;

  constructor(rows: readonly LibraryRow[], options: PredictorOptions = {}) {
    const regimes = options.regimes;
    this.rows = regimes ? rows.filter((r) => regimes.includes(r.regime)) : rows;
    const decode = this.rows.filter((r) => r.kind === "decode");
    const prefill = this.rows.filter((r) => r.kind === "prefill");
    this.decodeGrid = new LadderGrid(
      decode.map((r) => ({ outer: r.batch, inner: r.kv / r.batch, value: r.wallMs })),
      { outer: "batch", inner: "KV tokens per request" },
    );
    this.decodeRange = decode.length
      ? { batch: range(decode.map((r) => r.batch)), kv: range(decode.map((r) => r.kv)) }
      : null;
    this.prefillRange = prefill.length ? { tokens: range(prefill.map((r) => r.tokens)) } : null;
    this.decodeFit = decode.length
      ? linearFit(["1", "requests", "kv_tokens"], decode.map((r) => [1, r.batch, r.kv]), decode)
      : null;
    this.prefillFit = prefill.length
      ? linearFit(["1", "tokens"], prefill.map((r) => [1, r.tokens]), prefill)
      : null;
  }

  /** The predictor over the measured rows of `artifacts`. */
  static fromArtifacts(
    artifacts: readonly BenchArtifact[],
    options: PredictorOptions = {},
  ): LatencyPredictor {
    return new LatencyPredictor(libraryRows(artifacts), options);
  }

  /** Regimes present in the rows, per kind. */
  regimes(kind: "prefill" | "decode"): string[] {
    return [...new Set(this.rows.filter((r) => r.kind === kind).map((r) => r.regime))].sort();
  }

  /** Decode step of `batch` requests reading `kv` KV tokens together. */
  decode(batch: number, kv: number, method: PredictMethod): Prediction {
    if (!Number.isInteger(batch) || batch < 1) throw new Error(`batch must be >= 1, got ${batch}`);
    if (!Number.isInteger(kv) || kv < batch) {
      throw new Error(`a decode step's KV tokens must be >= its batch (${batch}), got ${kv}`);
    }
    const dr = this.decodeRange;
    if (!dr || !this.decodeFit) {
      throw new OutsideDomainError(`the library has no decode rows${this.filterNote()}`);
    }
    if (method === "fit") {
      checkIn("batch", batch, dr.batch);
      checkIn("KV tokens", kv, dr.kv);
      return { wallMs: evalFit(this.decodeFit, [1, batch, kv]), method, kind: "decode" };
    }
    const v = this.decodeGrid.at(batch, kv / batch);
    if ("outside" in v) {
      throw new OutsideDomainError(`decode batch ${batch}, KV ${kv}: ${v.outside}`);
    }
    return { wallMs: v.value, method, kind: "decode" };
  }

  /**
   * Prefill step of `tokens` new tokens reading `kv` cached KV tokens (default 0); with
   * `batch`, the grid uses only rows of that batch size.
   */
  prefill(
    tokens: number,
    query: { readonly kv?: number; readonly batch?: number },
    method: PredictMethod,
  ): Prediction {
    const kv = query.kv ?? 0;
    if (!Number.isInteger(tokens) || tokens < 1) {
      throw new Error(`tokens must be >= 1, got ${tokens}`);
    }
    if (!Number.isInteger(kv) || kv < 0) throw new Error(`KV tokens must be >= 0, got ${kv}`);
    const pr = this.prefillRange;
    if (!pr || !this.prefillFit) {
      throw new OutsideDomainError(`the library has no prefill rows${this.filterNote()}`);
    }
    if (method === "fit") {
      checkIn("prefill tokens", tokens, pr.tokens);
      return { wallMs: evalFit(this.prefillFit, [1, tokens]), method, kind: "prefill" };
    }
    let rows = this.rows.filter((r) => r.kind === "prefill");
    if (query.batch !== undefined) {
      const sized = rows.filter((r) => r.batch === query.batch);
      if (sized.length === 0) {
        throw new OutsideDomainError(
          `no prefill rows at batch ${query.batch}; collected batches: ${
            [...new Set(rows.map((r) => r.batch))].sort((a, b) => a - b).join(", ")
          }`,
        );
      }
      rows = sized;
    }
    const grid = new LadderGrid(
      rows.map((r) => ({ outer: r.kv, inner: r.tokens, value: r.wallMs })),
      { outer: "KV-read tokens", inner: "prefill tokens" },
    );
    const v = grid.at(kv, tokens);
    if ("outside" in v) {
      throw new OutsideDomainError(`prefill ${tokens} tokens, KV ${kv}: ${v.outside}`);
    }
    return { wallMs: v.value, method, kind: "prefill" };
  }

  /** A served step (see the module doc for how it maps onto the library). */
  step(step: StepSumsLike, method: PredictMethod): Prediction {
    if (step.num_requests < 1) throw new Error("a step without requests");
    if (step.num_prefill_requests === 0) {
      return this.decode(step.num_decode_requests, step.sum_decode_kv_tokens, method);
    }
    return this.prefill(
      step.num_scheduled_tokens,
      { kv: step.sum_prefill_kv_tokens + step.sum_decode_kv_tokens },
      method,
    );
  }

  private filterNote(): string {
    return this.rows.length === 0 ? " (none after the regime filter)" : "";
  }
}

function range(values: number[]): Range {
  return [Math.min(...values), Math.max(...values)];
}

function checkIn(name: string, v: number, [lo, hi]: Range): void {
  if (v < lo || v > hi) {
    throw new OutsideDomainError(`${name} ${v} is outside the collected range [${lo}, ${hi}]`);
  }
}

function evalFit(fit: LinearFit, x: readonly number[]): number {
  return fit.coefficients.reduce((s, c, i) => s + c * x[i], 0);
}

function linearFit(terms: string[], X: number[][], rows: readonly LibraryRow[]): LinearFit {
  const y = rows.map((r) => r.wallMs);
  const { x } = nnls(X, y);
  const fit = { terms, coefficients: x, n: rows.length, rmseMs: 0, mapePct: 0 };
  const pred = X.map((row) => evalFit(fit, row));
  fit.rmseMs = Math.sqrt(pred.reduce((s, p, i) => s + (p - y[i]) ** 2, 0) / y.length);
  fit.mapePct = (100 * pred.reduce((s, p, i) => s + Math.abs(p - y[i]) / y[i], 0)) / y.length;
  return fit;
}
