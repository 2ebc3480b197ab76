/**
 * `deno task logits`: the GPU model's logits at every position of one prompt, written as
 * a safetensors file with `logits` [tokens, vocab] F32 and `token_ids` [tokens] I32 (and
 * metadata: model, dtype, adapter). Prompts longer than one step's logit rows run as
 * chunked prefill. The file appears only when complete (written beside it, then renamed).
 *
 * ```
 * deno task logits --model fixtures/out/tiny-qwen3-moe --prompt "Hello world" --out hw.safetensors
 * deno task logits --model DIR --token-ids 9707,1879 --out ids.safetensors --dtype f16
 * ```
 * Exit codes: 0 done; 2 bad usage or input (missing model folder, unsupported
 * architecture, missing tensor, empty prompt, token id outside the vocabulary, prompt
 * longer than the model's positions, no adapter); 1 anything else.
 */
import { existsSync, statSync } from "node:fs";
import { dirname } from "node:path";
import process from "node:process";
import { describeGpu, openGpu } from "../gpu/device.ts";
import { GpuModel } from "../model/gpu_model.ts";
import { SafetensorsWriter } from "../model/safetensors_writer.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { openModelSpec, parseTokenIds, promptTokenIds } from "./model_spec.ts";
import { logitsChunkSize, promptLogits } from "./prompt_logits.ts";
import { InputError, runCli } from "./run_cli.ts";
import { TENSOR_CORE_OPTIONS, tensorCoreOptions } from "./model_options.ts";

const SPEC = {
  model: {
    type: "string",
    help: "checkpoint folder (config.json + safetensors) or synthetic:NAME",
  },
  prompt: { type: "string", help: "prompt text, tokenized with the model's tokenizer" },
  tokenIds: { type: "list", help: "the prompt as token ids instead of text" },
  out: { type: "string", help: "output file (.safetensors)" },
  dtype: {
    type: "string",
    values: ["f32", "f16"],
    default: "f32",
    help: "weight and KV storage on the GPU (f32: the exact path; f16 halves memory)",
  },
  maxStepTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "most prompt tokens per prefill step (default: as many as one step returns)",
  },
  ...TENSOR_CORE_OPTIONS,
} as const;

await runCli(async () => {
  const opts = parseArgs(
    "logits",
    "Writes the GPU model's logits at every prompt position to a safetensors file.",
    SPEC,
    process.argv.slice(2),
  );
  if (!opts.model) throw new UsageError("--model is required");
  if (!opts.out) throw new UsageError("--out is required");
  if ((opts.prompt === undefined) === (opts.tokenIds === undefined)) {
    throw new UsageError("give exactly one of --prompt TEXT and --token-ids 1,2,3");
  }
  const out = userPath(opts.out);
  const outDir = dirname(out);
  if (!existsSync(outDir) || !statSync(outDir).isDirectory()) {
    throw new InputError(`--out: folder ${outDir} does not exist`);
  }
  if (existsSync(out) && statSync(out).isDirectory()) {
    throw new InputError(`--out ${out} is a folder`);
  }
  const model = openModelSpec(opts.model);
  if (model.tokenizerNote && opts.prompt !== undefined) console.error(model.tokenizerNote);
  const ids = opts.tokenIds !== undefined
    ? parseTokenIds(opts.tokenIds, model.config)
    : promptTokenIds(model.tokenizer, model.config, opts.prompt!);
  const maxPositions = model.config.maxPositionEmbeddings;
  if (ids.length > maxPositions) {
    throw new InputError(
      `the prompt has ${ids.length} tokens, more than the model's ${maxPositions} positions`,
    );
  }

  const gpu = await openGpu();
  console.error(describeGpu(gpu));
  const gpuModel = await GpuModel.load(gpu, model.spec, {
    dtype: opts.dtype as "f32" | "f16",
    maxModelLen: Math.max(2, ids.length),
    numBlocks: Math.ceil(ids.length / 16) + 1,
    blockSize: 16,
    maxNumSeqs: 1,
    maxNumTokens: Math.min(ids.length, opts.maxStepTokens ?? 2048),
    ...tensorCoreOptions(opts),
  }, (m) => console.error(m));
  const vocab = gpuModel.vocabSize;
  const chunk = logitsChunkSize(gpuModel, opts.maxStepTokens);
  const writer = SafetensorsWriter.create(out, [
    { name: "logits", dtype: "F32", shape: [ids.length, vocab] },
    { name: "token_ids", dtype: "I32", shape: [ids.length] },
  ], {
    format: "pt",
    model: model.spec,
    dtype: opts.dtype,
    adapter: gpu.adapter.description,
  });
  const t0 = performance.now();
  let steps: number;
  let next = -1;
  try {
    steps = await promptLogits(gpuModel, ids, {
      maxStepTokens: chunk,
      onChunk: (start, logits) => {
        writer.write(new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
        if (start + logits.length / vocab === ids.length) {
          next = argmax(logits.subarray(logits.length - vocab));
        }
      },
    });
    writer.write(new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength));
    writer.close();
  } catch (err) {
    writer.abort();
    throw err;
  }
  const ms = performance.now() - t0;
  console.log(
    `${ids.length} tokens in ${steps} prefill step${steps === 1 ? "" : "s"} of at most ${chunk} ` +
      `(${ms.toFixed(0)} ms): logits [${ids.length}, ${vocab}] f32 -> ${out}`,
  );
  console.log(
    `greedy next token after position ${ids.length - 1}: ${next} ${
      JSON.stringify(model.tokenizer.decode([next]))
    }`,
  );
  gpuModel.destroy();
  gpu.destroy();
  return 0;
});

function argmax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}
