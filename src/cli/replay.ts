/**
 * `deno task replay --model M --trace TRACE.jsonl --out STEPS.jsonl`: serves a request
 * trace through the engine (continuous batching, chunked prefill, the trace's real
 * arrival times) on the GPU model and logs every step's shape and times, one JSON line
 * per step (src/report/served_steps.ts), for `deno task fidelity`.
 */
import { createHash } from "node:crypto";
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import process from "node:process";
import { describeGpu, openGpu } from "../gpu/device.ts";
import { Engine } from "../engine/engine.ts";
import { parseRequestTrace } from "../report/request_trace.ts";
import { formatStepLine, SERVED_STEPS_SCHEMA_VERSION } from "../report/served_steps.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs } from "./args.ts";
import { loadModel, loadTokenizer, MODEL_OPTIONS } from "./model_options.ts";
import { InputError, runCli } from "./run_cli.ts";
import { type ServedRequest, serveTrace } from "./serve_trace.ts";

const SPEC = {
  ...MODEL_OPTIONS,
  trace: { type: "string", help: "request trace (JSON Lines from deno task trace-gen)" },
  out: { type: "string", help: "step log to write (JSON Lines)" },
  async: { type: "string", values: ["on", "off"], default: "on", help: "async scheduling" },
  maxNumBatchedTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "token budget of a step (default: min(2048, the model's max tokens))",
  },
  prefixCaching: { type: "string", values: ["on", "off"], default: "on", help: "prefix caching" },
  limit: { type: "number", integer: true, min: 1, help: "serve only the first N requests" },
  warmup: {
    type: "string",
    values: ["on", "off"],
    default: "on",
    help: "before serving, one unlogged 256-token request for 5 steps (compiles the pipelines)",
  },
} as const;

await runCli(async () => {
  const opts = parseArgs(
    "replay",
    "Serves a request trace through the engine and logs every step's shape and times.",
    SPEC,
    process.argv.slice(2),
  );
  if (!opts.trace) throw new InputError("--trace is required");
  if (!opts.out) throw new InputError("--out is required");
  const tracePath = userPath(opts.trace);
  let text: string;
  try {
    text = readFileSync(tracePath, "utf8");
  } catch (err) {
    throw new InputError(`--trace ${opts.trace}: ${(err as Error).message}`);
  }
  let trace;
  try {
    trace = parseRequestTrace(text, opts.trace);
  } catch (err) {
    throw new InputError((err as Error).message);
  }
  const chosen = opts.limit ? trace.requests.slice(0, opts.limit) : trace.requests;
  if (chosen.length === 0) throw new InputError(`--trace ${opts.trace}: no requests to serve`);
  // the step log's folder, made (or refused) before the model loads
  try {
    mkdirSync(dirname(userPath(opts.out)), { recursive: true });
  } catch (err) {
    throw new InputError(`--out ${opts.out}: ${(err as Error).message}`);
  }
  const tokenizer = loadTokenizer(opts);
  let mismatches = 0;
  const tokenized = chosen.map((r) => {
    let ids = tokenizer.encode(r.prompt);
    if (ids.length !== r.prompt_tokens) mismatches++;
    if (ids.length > r.prompt_tokens) ids = ids.slice(0, r.prompt_tokens);
    return { r, ids };
  });

  const gpu = await openGpu();
  const log = (line: string) => console.error(line);
  const model = await loadModel(gpu, opts, log);
  const batched = opts.maxNumBatchedTokens ?? Math.min(2048, model.maxNumTokens);
  if (batched > model.maxNumTokens) {
    throw new InputError(
      `--max-num-batched-tokens ${batched} exceeds the model's ${model.maxNumTokens} tokens a step`,
    );
  }
  const engine = new Engine(model, {
    maxNumBatchedTokens: batched,
    maxNumSeqs: model.maxNumSeqs,
    asyncScheduling: opts.async === "on",
    enablePrefixCaching: opts.prefixCaching === "on",
  });
  const requests: ServedRequest[] = tokenized.map(({ r, ids }) => {
    for (const id of ids) {
      if (id >= model.vocabSize) {
        throw new InputError(
          `request ${r.id}: token ${id} is outside the model's vocabulary of ${model.vocabSize} ` +
            `(the tokenizer does not belong to this model)`,
        );
      }
    }
    if (ids.length >= engine.config.maxModelLen) {
      throw new InputError(
        `request ${r.id}: its ${ids.length}-token prompt does not fit max_model_len ` +
          `${engine.config.maxModelLen}; regenerate the trace with a smaller --prompt-max`,
      );
    }
    return { id: r.id, arrivalMs: r.arrival_ms, promptIds: ids, maxTokens: r.max_tokens };
  });

  if (opts.warmup === "on") {
    const len = Math.max(1, Math.min(256, batched, engine.config.maxModelLen - 6));
    const prompt = Int32Array.from(
      { length: len },
      (_, i) => 1 + (i * 7919) % (model.vocabSize - 1),
    );
    engine.addRequest(prompt, { maxTokens: 5, ignoreEos: true, cacheSalt: "__replay_warmup" }, {
      requestId: "__replay_warmup",
    });
    const t = performance.now();
    await engine.runUntilDone();
    log(`warm-up: ${len}-token request, 5 steps, ${((performance.now() - t) / 1000).toFixed(1)} s`);
  }
  const outPath = userPath(opts.out);
  writeFileSync(
    outPath,
    formatStepLine({
      kind: "replay_header",
      schema_version: SERVED_STEPS_SCHEMA_VERSION,
      model: opts.model!,
      trace: {
        path: opts.trace,
        sha256: createHash("sha256").update(text).digest("hex"),
        requests: requests.length,
      },
      engine: { ...engine.config, numBlocks: model.numBlocks, blockSize: model.blockSize },
      gpu: describeGpu(gpu).split("\n")[0],
      started_at: new Date().toISOString(),
    }),
  );
  log(
    `serving ${requests.length} requests over ${
      (requests[requests.length - 1].arrivalMs / 1000).toFixed(1)
    } s of arrivals`,
  );
  // Step lines reach the file every 256 steps or 2 s, so a stopped replay keeps its steps.
  let pending = "";
  let lines = 0;
  let flushedAt = performance.now();
  const result = await serveTrace(engine, requests, {
    onStep: (step) => {
      pending += formatStepLine(step);
      lines++;
      if (lines % 256 === 0 || performance.now() - flushedAt > 2000) {
        appendFileSync(outPath, pending);
        pending = "";
        flushedAt = performance.now();
        log(`${lines} steps, ${(step.t_ms / 1000).toFixed(1)} s`);
      }
    },
  });
  appendFileSync(
    outPath,
    pending + formatStepLine({
      kind: "replay_summary",
      requests: requests.length,
      finished: result.finished,
      steps: result.steps,
      elapsed_s: Math.round(result.elapsedMs) / 1000,
      prompt_length_mismatches: mismatches,
    }),
  );
  console.log(
    `${result.steps} steps for ${requests.length} requests in ${
      (result.elapsedMs / 1000).toFixed(1)
    } s (finished: ${JSON.stringify(result.finished)}); wrote ${opts.out}`,
  );
  model.destroy();
  gpu.destroy();
  return 0;
});
