/**
 * Generates served traffic: arrivals, prompt and output lengths from distributions fitted
 * to a public production trace, and prompts cut from the held-out half of the real-text
 * corpus (the latency library is measured on the other half).
 *
 * Defaults come from the Azure LLM inference trace 2023, conversation service (19,366
 * requests over one hour, published with the Splitwise paper, ISCA 2024):
 * - prompt tokens: median 1020, p90 2735 -> log-normal median 1020, sigma
 *   ln(2735/1020)/1.2816 = 0.77 (matched at the median and 90th percentile);
 * - output tokens: median 129, p90 424 -> log-normal median 129, sigma 0.93, at most
 *   1000 (the trace's own cap);
 * - arrivals: 5.53 requests/s, inter-arrival gaps with coefficient of variation 1.094 ->
 *   gamma gaps of shape 1/1.094^2 = 0.84 (a little burstier than Poisson).
 *
 * ```ts
 * const trace = generateTrace(pool, { requests: 100, seed: "1" });
 * trace.requests[0].prompt_tokens;
 * ```
 */
import { Rng } from "../util/rng.ts";
import {
  type ArrivalProcess,
  type LengthDistribution,
  type RequestTrace,
  TRACE_SCHEMA_VERSION,
  type TraceCorpus,
  type TraceRequest,
} from "./request_trace.ts";

/** Where the defaults come from (recorded in every trace header). */
export const TRACE_DEFAULTS_PROVENANCE =
  "log-normal lengths matched to the median and p90 of the Azure LLM inference trace 2023 " +
  "(conversation: prompt 1020/2735, output 129/424 tokens); gamma arrivals with the trace's " +
  "inter-arrival coefficient of variation 1.094 (shape 0.84) at its mean rate 5.53 req/s";

/** Default knobs (see the module doc for their source). */
export const TRACE_DEFAULTS = Object.freeze({
  requests: 200,
  rateRps: 5.53,
  shape: 0.84,
  promptMedian: 1020,
  promptSigma: 0.77,
  promptMax: 4096,
  outputMedian: 129,
  outputSigma: 0.93,
  outputMax: 1000,
});

/** The held-out token pool the prompts are cut from. */
export interface HeldOutPool {
  /** Tokens of the held-out documents, concatenated. */
  readonly tokens: Int32Array;
  /** Text of a window of tokens. */
  readonly decode: (ids: Int32Array) => string;
  /** Provenance recorded in the header (`half` is always "held_out"). */
  readonly corpus: Omit<TraceCorpus, "half" | "tokens">;
}

/** What to generate; every field has the default above. */
export interface TraceOptions {
  readonly requests?: number;
  readonly seed?: string;
  readonly rateRps?: number;
  /** Gamma shape of the inter-arrival gaps; 1 is Poisson, < 1 bursty. */
  readonly shape?: number;
  readonly promptMedian?: number;
  readonly promptSigma?: number;
  readonly promptMin?: number;
  readonly promptMax?: number;
  readonly outputMedian?: number;
  readonly outputSigma?: number;
  readonly outputMin?: number;
  readonly outputMax?: number;
  /** Text that names where the parameters come from (default: the Azure trace sentence). */
  readonly provenance?: string;
}

/** Draws a trace; deterministic for a given pool, options and seed. */
export function generateTrace(pool: HeldOutPool, options: TraceOptions = {}): RequestTrace {
  const o = { ...TRACE_DEFAULTS, promptMin: 1, outputMin: 1, seed: "0", ...options };
  const positiveInt = (name: string, v: number) => {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be an integer >= 1, got ${v}`);
  };
  positiveInt("requests", o.requests);
  for (const [name, v] of [["rate", o.rateRps], ["shape", o.shape]] as const) {
    if (!(Number.isFinite(v) && v > 0)) throw new Error(`${name} must be > 0, got ${v}`);
  }
  const prompt = lengthDistribution(
    "prompt",
    o.promptMedian,
    o.promptSigma,
    o.promptMin,
    o.promptMax,
  );
  const output = lengthDistribution(
    "output",
    o.outputMedian,
    o.outputSigma,
    o.outputMin,
    o.outputMax,
  );
  if (pool.tokens.length < prompt.max) {
    throw new Error(
      `the held-out pool has ${pool.tokens.length} tokens, fewer than the longest prompt (${prompt.max})`,
    );
  }
  const arrival: ArrivalProcess = {
    process: o.shape === 1 ? "poisson" : "gamma",
    rate_rps: o.rateRps,
    shape: o.shape,
  };
  const rng = Rng.fromSeed(`trace-v1:${o.seed}`);
  const requests: TraceRequest[] = [];
  let t = 0;
  for (let i = 0; i < o.requests; i++) {
    if (i > 0) t += gammaSample(rng, o.shape) / (o.shape * o.rateRps) * 1000;
    const promptTokens = drawLength(rng, prompt);
    const maxTokens = drawLength(rng, output);
    const offset = rng.int(0, pool.tokens.length);
    const window = new Int32Array(promptTokens);
    for (let j = 0; j < promptTokens; j++) {
      window[j] = pool.tokens[(offset + j) % pool.tokens.length];
    }
    requests.push({
      kind: "request",
      id: `r${i}`,
      arrival_ms: Math.round(t * 1000) / 1000,
      prompt: pool.decode(window),
      prompt_tokens: promptTokens,
      max_tokens: maxTokens,
    });
  }
  return {
    header: {
      kind: "trace_header",
      schema_version: TRACE_SCHEMA_VERSION,
      requests: o.requests,
      seed: o.seed,
      arrival,
      prompt_len: prompt,
      output_len: output,
      corpus: { ...pool.corpus, half: "held_out", tokens: pool.tokens.length },
      provenance: o.provenance ?? TRACE_DEFAULTS_PROVENANCE,
    },
    requests,
  };
}

function lengthDistribution(
  what: string,
  median: number,
  sigma: number,
  min: number,
  max: number,
): LengthDistribution {
  if (!(Number.isFinite(median) && median > 0)) {
    throw new Error(`${what} median must be > 0, got ${median}`);
  }
  if (!(Number.isFinite(sigma) && sigma >= 0)) {
    throw new Error(`${what} sigma must be >= 0, got ${sigma}`);
  }
  if (!Number.isInteger(min) || min < 1 || !Number.isInteger(max) || max < min) {
    throw new Error(`${what} lengths need integers 1 <= min <= max, got min ${min}, max ${max}`);
  }
  return { dist: "lognormal", median, sigma, min, max };
}

/** A log-normal length, rounded and clipped to [min, max]. */
function drawLength(rng: Rng, d: LengthDistribution): number {
  const x = Math.round(d.median * Math.exp(d.sigma * rng.normal()));
  return Math.min(d.max, Math.max(d.min, x));
}

/**
 * Gamma(shape, 1) sample: Marsaglia and Tsang's method, with the U^(1/k) boost for
 * shape < 1 (exported for its distribution test).
 */
export function gammaSample(rng: Rng, shape: number): number {
  if (shape < 1) {
    let u = rng.float();
    while (u === 0) u = rng.float();
    return gammaSample(rng, shape + 1) * Math.pow(u, 1 / shape);
  }
  const d = shape - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    let x: number, v: number;
    do {
      x = rng.normal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const u = rng.float();
    if (u < 1 - 0.0331 * x ** 4) return d * v;
    if (Math.log(u) < 0.5 * x * x + d * (1 - v + Math.log(v))) return d * v;
  }
}
