/**
 * `deno task generate`: serves one or more prompts at once through the Engine (continuous
 * batching) on the GPU model, streams each request's text as its tokens arrive, and ends
 * with per-request token counts and rates. Prompts are tokenized with the checkpoint's
 * tokenizer (synthetic models use the real Qwen3 tokenizer).
 *
 * ```
 * deno task generate --model fixtures/out/tiny-qwen3-moe --prompt "Hello" --max-tokens 16
 * deno task generate --model synthetic:qwen3-30b-a3b --prompt "Hi" --prompt "Once upon" \
 *   --max-tokens 64 --temperature 0.8 --seed 1 --async
 * ```
 * With one prompt the text streams as it is; with several, every arriving piece is a line
 * `[i] text` (newlines shown as \n), and the whole texts follow at the end. Request i
 * samples with seed `--seed + i`.
 *
 * Exit codes: 0 done; 2 bad usage or input (missing model folder, unsupported
 * architecture, missing tensor, empty prompt, a prompt token outside the model's
 * vocabulary, a prompt not shorter than max_model_len, no adapter); 1 anything else.
 */
import process from "node:process";
import { describeGpu, openGpu } from "../gpu/device.ts";
import { GpuModel } from "../model/gpu_model.ts";
import type { ModelTokenizer } from "../model/tokenizer.ts";
import { formatTable } from "../util/table.ts";
import { parseArgs, UsageError } from "./args.ts";
import { openModelSpec, promptTokenIds } from "./model_spec.ts";
import { InputError, runCli } from "./run_cli.ts";
import { servePrompts } from "./serve_prompts.ts";

const SPEC = {
  model: {
    type: "string",
    help: "checkpoint folder (config.json + safetensors) or synthetic:NAME",
  },
  prompt: { type: "string", help: "prompt text; repeat the flag for several requests" },
  maxTokens: { type: "number", integer: true, min: 1, help: "output tokens per request at most" },
  temperature: { type: "number", min: 0, default: 0, help: "0 = greedy" },
  seed: { type: "number", integer: true, min: 0, default: 0, help: "request i uses seed + i" },
  async: {
    type: "boolean",
    default: false,
    help: "schedule step N+1 while step N runs (async scheduling)",
  },
  ignoreEos: { type: "boolean", default: false, help: "keep generating past end-of-sequence" },
  dtype: {
    type: "string",
    values: ["f16", "f32"],
    help: "weight and KV storage on the GPU (default: f16 where the adapter has it)",
  },
  maxModelLen: {
    type: "number",
    integer: true,
    min: 2,
    help: "prompt + output tokens per request at most (default: the model's positions)",
  },
} as const;

/**
 * Turns a request's growing token list into text pieces: each call returns the text the
 * new tokens added, holding back an incomplete UTF-8 character until its bytes arrive.
 */
class TextStream {
  private readonly ids: number[] = [];
  private emitted = 0;

  constructor(private readonly tokenizer: ModelTokenizer) {}

  push(tokenId: number): string {
    this.ids.push(tokenId);
    const text = this.tokenizer.decode(this.ids);
    if (text.endsWith("\uFFFD")) return "";
    const piece = text.slice(this.emitted);
    this.emitted = text.length;
    return piece;
  }

  get text(): string {
    return this.tokenizer.decode(this.ids);
  }
}

/** Takes every `--prompt X` / `--prompt=X` out of argv (the option may repeat). */
function takePrompts(argv: readonly string[]): { prompts: string[]; rest: string[] } {
  const prompts: string[] = [], rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--prompt") {
      if (i + 1 >= argv.length) throw new UsageError("--prompt needs a value");
      prompts.push(argv[++i]);
    } else if (arg.startsWith("--prompt=")) {
      prompts.push(arg.slice("--prompt=".length));
    } else {
      rest.push(arg);
    }
  }
  return { prompts, rest };
}

await runCli(async () => {
  const summary = "Serves prompts through the engine on the GPU model and streams the text.";
  const { prompts, rest } = takePrompts(process.argv.slice(2));
  const opts = parseArgs("generate", summary, SPEC, rest);
  if (!opts.model) throw new UsageError("--model is required");
  if (prompts.length === 0) throw new UsageError("--prompt is required (repeat it for several)");
  if (opts.maxTokens === undefined) throw new UsageError("--max-tokens is required");
  const model = openModelSpec(opts.model);
  if (model.tokenizerNote) console.error(model.tokenizerNote);
  const maxModelLen = opts.maxModelLen ?? model.config.maxPositionEmbeddings;
  if (maxModelLen > model.config.maxPositionEmbeddings) {
    throw new InputError(
      `--max-model-len ${maxModelLen} exceeds the model's ${model.config.maxPositionEmbeddings} positions`,
    );
  }
  const ids = prompts.map((text, i) =>
    promptTokenIds(model.tokenizer, model.config, text, `prompt ${i}`)
  );
  ids.forEach((p, i) => {
    if (p.length >= maxModelLen) {
      throw new InputError(
        `prompt ${i} has ${p.length} tokens; max_model_len is ${maxModelLen}, so it leaves no room to generate`,
      );
    }
  });

  const gpu = await openGpu();
  console.error(describeGpu(gpu));
  const gpuModel = await GpuModel.load(gpu, model.spec, {
    dtype: opts.dtype as "f16" | "f32" | undefined,
    maxModelLen,
  }, (m) => console.error(m));
  const several = prompts.length > 1;
  const streams = ids.map(() => new TextStream(model.tokenizer));
  if (!several) process.stdout.write(prompts[0]);
  const result = await servePrompts(gpuModel, ids, {
    maxTokens: opts.maxTokens,
    temperature: opts.temperature,
    seed: opts.seed,
    ignoreEos: opts.ignoreEos,
    asyncScheduling: opts.async,
    onToken: (index, tokenId) => {
      const piece = streams[index].push(tokenId);
      if (piece === "") return;
      if (several) console.log(`[${index}] ${piece.replaceAll("\n", "\\n")}`);
      else process.stdout.write(piece);
    },
  });
  console.log("");
  if (several) {
    console.log("");
    result.requests.forEach((r, i) => console.log(`[${i}] ${prompts[i]}${streams[r.index].text}`));
    console.log("");
  }
  const rows = result.requests.map((r) => [
    String(r.index),
    String(r.numPromptTokens),
    String(r.numCachedTokens),
    String(r.outputTokenIds.length),
    r.finishReason ?? "-",
    r.firstTokenMs === null ? "-" : r.firstTokenMs.toFixed(0),
    r.finishMs > 0 ? (r.outputTokenIds.length / (r.finishMs / 1000)).toFixed(2) : "-",
  ]);
  console.log(formatTable(
    ["request", "prompt tokens", "cached", "output tokens", "finish", "first token ms", "tokens/s"],
    rows,
  ));
  const total = result.requests.reduce((s, r) => s + r.outputTokenIds.length, 0);
  console.log(
    `${total} tokens for ${prompts.length} request${several ? "s" : ""} in ${result.numSteps} ` +
      `steps, ${(result.wallMs / 1000).toFixed(2)} s: ${
        (total / (result.wallMs / 1000)).toFixed(2)
      } tokens/s (${opts.async ? "async" : "sync"} scheduling, ${gpuModel.weights.dtype})`,
  );
  gpuModel.destroy();
  gpu.destroy();
  return 0;
});
