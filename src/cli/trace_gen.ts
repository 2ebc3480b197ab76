/**
 * `deno task trace-gen --out TRACE.jsonl [--requests N] [--rate R] [--shape K] [--seed S]
 * [--prompt-median M] [--prompt-sigma s] [--prompt-max X] [--output-median M]
 * [--output-sigma s] [--output-max X] [--tokenizer DIR]`: writes a request trace for
 * `deno task replay`: gamma arrivals (shape 1 = Poisson, < 1 bursty), log-normal prompt
 * and output lengths (defaults fitted to the Azure LLM inference trace 2023,
 * conversation service), prompts cut from the held-out half of the real-text corpus
 * (nlp-corpus bodies whose sha256(body)[0] is odd; the benchmark measures on the other
 * half).
 */
import { writeFileAtomic } from "../util/atomic_file.ts";
import process from "node:process";
import {
  isCollectionBody,
  loadTextBodies,
  TEXT_DATASET_PACKAGE,
  TEXT_DATASET_SHA256,
} from "../bench/text_pool.ts";
import { ModelTokenizer, qwen3TokenizerJsonPath } from "../model/tokenizer.ts";
import {
  formatRequestTrace,
  type RequestTrace,
  type TraceRequest,
} from "../report/request_trace.ts";
import { generateTrace, type HeldOutPool, TRACE_DEFAULTS } from "../report/trace_generator.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { InputError, runCli } from "./run_cli.ts";

const D = TRACE_DEFAULTS;
const SPEC = {
  out: { type: "string", help: "trace file to write (JSON Lines)" },
  requests: { type: "number", integer: true, min: 1, default: D.requests, help: "requests" },
  rate: { type: "number", min: 0, default: D.rateRps, help: "mean arrivals per second" },
  shape: {
    type: "number",
    min: 0,
    default: D.shape,
    help: "gamma shape of the gaps (1 = Poisson, < 1 bursty)",
  },
  seed: { type: "string", default: "0", help: "seed" },
  promptMedian: { type: "number", min: 1, default: D.promptMedian, help: "median prompt tokens" },
  promptSigma: {
    type: "number",
    min: 0,
    default: D.promptSigma,
    help: "sigma of ln(prompt tokens)",
  },
  promptMax: {
    type: "number",
    integer: true,
    min: 1,
    default: D.promptMax,
    help: "longest prompt",
  },
  outputMedian: { type: "number", min: 1, default: D.outputMedian, help: "median output tokens" },
  outputSigma: {
    type: "number",
    min: 0,
    default: D.outputSigma,
    help: "sigma of ln(output tokens)",
  },
  outputMax: {
    type: "number",
    integer: true,
    min: 1,
    default: D.outputMax,
    help: "longest output",
  },
  tokenizer: { type: "string", help: "folder with tokenizer.json (default: Qwen3's)" },
} as const;

await runCli(() => {
  const opts = parseArgs(
    "trace-gen",
    "Writes a request trace with realistic arrivals and lengths, prompts from the held-out corpus half.",
    SPEC,
    process.argv.slice(2),
  );
  if (!opts.out) throw new UsageError("--out is required");
  if (!(opts.rate > 0)) throw new UsageError("--rate must be > 0");
  if (!(opts.shape > 0)) throw new UsageError("--shape must be > 0");
  let tokenizer: ModelTokenizer;
  try {
    tokenizer = opts.tokenizer
      ? ModelTokenizer.fromDir(userPath(opts.tokenizer))
      : ModelTokenizer.fromFile(qwen3TokenizerJsonPath());
  } catch (err) {
    throw new InputError(`--tokenizer: ${(err as Error).message}`);
  }
  const { bodies, version } = loadTextBodies();
  const heldOut = bodies.filter((b) => !isCollectionBody(b));
  const want = Math.max(200_000, 4 * opts.promptMax);
  const parts: Int32Array[] = [];
  let total = 0, used = 0, chunk = "";
  const flush = () => {
    if (!chunk) return;
    const ids = tokenizer.encode(chunk);
    parts.push(ids);
    total += ids.length;
    chunk = "";
  };
  for (const body of heldOut) {
    if (total >= want) break;
    chunk += body + "\n";
    used++;
    if (chunk.length >= 16384) flush();
  }
  flush();
  const tokens = new Int32Array(total);
  parts.reduce((at, p) => (tokens.set(p, at), at + p.length), 0);
  const pool: HeldOutPool = {
    tokens,
    decode: (ids) => tokenizer.decode(ids),
    corpus: {
      name: `${TEXT_DATASET_PACKAGE}@${version} held-out bodies (sha256(body)[0] odd)`,
      sha256: TEXT_DATASET_SHA256,
      documents: used,
      tokenizer: tokenizer.path,
    },
  };
  let trace: RequestTrace;
  try {
    trace = generateTrace(pool, {
      requests: opts.requests,
      seed: opts.seed,
      rateRps: opts.rate,
      shape: opts.shape,
      promptMedian: opts.promptMedian,
      promptSigma: opts.promptSigma,
      promptMax: opts.promptMax,
      outputMedian: opts.outputMedian,
      outputSigma: opts.outputSigma,
      outputMax: opts.outputMax,
    });
  } catch (err) {
    throw new InputError((err as Error).message);
  }
  writeFileAtomic(userPath(opts.out), formatRequestTrace(trace));
  const last = trace.requests[trace.requests.length - 1];
  const sum = (f: (r: TraceRequest) => number) => trace.requests.reduce((s, r) => s + f(r), 0);
  console.log(
    `wrote ${opts.out}: ${trace.requests.length} requests over ${
      (last.arrival_ms / 1000).toFixed(1)
    } s, ` +
      `${sum((r) => r.prompt_tokens)} prompt and ${sum((r) => r.max_tokens)} output tokens ` +
      `(held-out pool: ${used} of ${heldOut.length} bodies, ${total} tokens)`,
  );
  return 0;
});
