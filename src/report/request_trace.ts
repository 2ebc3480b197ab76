/**
 * A request trace: the served traffic that `replay` feeds the engine and that fidelity
 * scores the latency library against. JSON Lines: one `trace_header` line, then one
 * `request` line per request in arrival order.
 *
 * ```
 * {"kind":"trace_header","schema_version":1,"requests":2,"seed":"0",...}
 * {"kind":"request","id":"r0","arrival_ms":0,"prompt":"Hello ...","prompt_tokens":812,"max_tokens":96}
 * {"kind":"request","id":"r1","arrival_ms":231.7,"prompt":"...","prompt_tokens":1304,"max_tokens":41}
 * ```
 *
 * `prompt` is real text (a window of the held-out half of the corpus); `prompt_tokens` is
 * its length in the generator's tokenizer, which replay keeps as the prompt's length;
 * `max_tokens` is the output length (replay ignores EOS so the output length holds).
 *
 * ```ts
 * const trace = parseRequestTrace(readFileSync("trace.jsonl", "utf8"), "trace.jsonl");
 * trace.requests[0].arrival_ms;
 * ```
 */

/** Schema version of the trace lines. */
export const TRACE_SCHEMA_VERSION = 1;

/** How lengths were drawn: a log-normal clipped to [min, max] (tokens). */
export interface LengthDistribution {
  readonly dist: "lognormal";
  /** Median of the log-normal, exp(mu). */
  readonly median: number;
  /** Standard deviation of ln(length). */
  readonly sigma: number;
  readonly min: number;
  readonly max: number;
}

/** How arrivals were drawn: gamma inter-arrival gaps (shape 1 = Poisson). */
export interface ArrivalProcess {
  readonly process: "poisson" | "gamma";
  /** Mean requests per second. */
  readonly rate_rps: number;
  /** Gamma shape k (1 for Poisson); the gaps' coefficient of variation is 1/sqrt(k). */
  readonly shape: number;
}

/** Where the prompts come from. */
export interface TraceCorpus {
  /** Name of the corpus (package and part). */
  readonly name: string;
  /** sha256 of the corpus as the pool code pins it. */
  readonly sha256: string;
  /** Which half: always "held_out" for served traffic (the library is built from the other). */
  readonly half: "held_out";
  /** Documents and tokens in the held-out pool. */
  readonly documents: number;
  readonly tokens: number;
  /** The tokenizer that measured `prompt_tokens`. */
  readonly tokenizer: string;
}

/** First line of a trace. */
export interface TraceHeader {
  readonly kind: "trace_header";
  readonly schema_version: typeof TRACE_SCHEMA_VERSION;
  readonly requests: number;
  readonly seed: string;
  readonly arrival: ArrivalProcess;
  readonly prompt_len: LengthDistribution;
  readonly output_len: LengthDistribution;
  readonly corpus: TraceCorpus;
  /** Where the default parameters come from, in words. */
  readonly provenance: string;
}

/** One request of a trace. */
export interface TraceRequest {
  readonly kind: "request";
  readonly id: string;
  /** Arrival time after the trace's start, ms; non-decreasing down the file. */
  readonly arrival_ms: number;
  readonly prompt: string;
  /** Prompt length in tokens (the generator's tokenizer). */
  readonly prompt_tokens: number;
  /** Output tokens to generate. */
  readonly max_tokens: number;
}

/** A parsed trace. */
export interface RequestTrace {
  readonly header: TraceHeader;
  readonly requests: readonly TraceRequest[];
}

/** The JSON Lines text of a trace (ends with a newline). */
export function formatRequestTrace(trace: RequestTrace): string {
  return [trace.header, ...trace.requests].map((x) => JSON.stringify(x)).join("\n") + "\n";
}

/**
 * Parses and checks a trace; throws an error naming the file, the line and the field for
 * anything malformed (unknown fields too).
 */
export function parseRequestTrace(text: string, name = "trace"): RequestTrace {
  const lines = text.split("\n").map((l, i) => [l.trim(), i + 1] as const).filter(([l]) => l);
  if (lines.length === 0) throw new Error(`${name}: empty trace`);
  const parsed = lines.map(([l, n]) => {
    try {
      return [JSON.parse(l), n] as const;
    } catch (err) {
      throw new Error(`${name}:${n}: not JSON: ${(err as Error).message}`);
    }
  });
  const [head, headLine] = parsed[0];
  const where = (n: number) => `${name}:${n}`;
  if (head?.kind !== "trace_header") {
    throw new Error(`${where(headLine)}: the first line must be the trace_header`);
  }
  if (head.schema_version !== TRACE_SCHEMA_VERSION) {
    throw new Error(
      `${
        where(headLine)
      }: schema_version ${head.schema_version}, this reader takes ${TRACE_SCHEMA_VERSION}`,
    );
  }
  const requests: TraceRequest[] = [];
  const ids = new Set<string>();
  let last = 0;
  for (const [obj, n] of parsed.slice(1)) {
    if (obj?.kind !== "request") throw new Error(`${where(n)}: expected a request line`);
    const allowed = ["kind", "id", "arrival_ms", "prompt", "prompt_tokens", "max_tokens"];
    for (const key of Object.keys(obj)) {
      if (!allowed.includes(key)) throw new Error(`${where(n)}: unknown field "${key}"`);
    }
    if (typeof obj.id !== "string" || obj.id === "") throw new Error(`${where(n)}: id`);
    if (ids.has(obj.id)) throw new Error(`${where(n)}: duplicate id "${obj.id}"`);
    ids.add(obj.id);
    if (typeof obj.arrival_ms !== "number" || !(obj.arrival_ms >= 0)) {
      throw new Error(`${where(n)}: arrival_ms must be a number >= 0`);
    }
    if (obj.arrival_ms < last) {
      throw new Error(`${where(n)}: arrival_ms ${obj.arrival_ms} is before the previous line's`);
    }
    last = obj.arrival_ms;
    if (typeof obj.prompt !== "string" || obj.prompt === "") {
      throw new Error(`${where(n)}: prompt must be non-empty text`);
    }
    for (const key of ["prompt_tokens", "max_tokens"]) {
      if (!Number.isInteger(obj[key]) || obj[key] < 1) {
        throw new Error(`${where(n)}: ${key} must be an integer >= 1`);
      }
    }
    requests.push(obj as TraceRequest);
  }
  if (requests.length !== head.requests) {
    throw new Error(
      `${name}: the header says ${head.requests} requests, the file has ${requests.length}`,
    );
  }
  return { header: head as TraceHeader, requests };
}
