/**
 * What a CLI's `--model` names, checked before any GPU work: a Hugging Face checkpoint
 * folder (config.json, the tensors the architecture needs, a tokenizer) or a
 * `synthetic:NAME` model. Every problem is an InputError (exit code 2) naming it. The
 * tokenizer is the folder's `tokenizer.json`; synthetic models, and folders without one,
 * use the real Qwen3 tokenizer (the fixtures' and synthetic models' vocabulary).
 *
 * ```ts
 * const { config, tokenizer } = openModelSpec("fixtures/out/tiny-qwen3-moe");
 * const ids = promptTokenIds(tokenizer, config, "Hello world"); // Int32Array [9707, 1879]
 * ```
 */
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { Checkpoint } from "../model/checkpoint.ts";
import { type ModelConfig, resolveModelConfig } from "../model/config.ts";
import { checkCheckpointTensors } from "../model/model_tensors.ts";
import { ModelTokenizer, qwen3TokenizerJsonPath } from "../model/tokenizer.ts";
import { userPath } from "../util/user_path.ts";
import { InputError } from "./run_cli.ts";

/** A checked `--model`: the spec GpuModel.load takes, its config and its tokenizer. */
export interface ModelSpec {
  /** `synthetic:NAME`, or the checkpoint folder as an absolute path. */
  readonly spec: string;
  readonly config: ModelConfig;
  readonly tokenizer: ModelTokenizer;
  /** A note for the user when the tokenizer is not the checkpoint's own, else null. */
  readonly tokenizerNote: string | null;
}

/**
 * Resolves and checks `--model` (a folder path relative to the caller, or `synthetic:NAME`):
 * its config and, for a folder, the checkpoint's tensors (names, shapes, dtypes, every shard
 * readable), before any GPU work. Throws InputError naming the problem.
 */
export function checkedModel(model: string): { spec: string; config: ModelConfig } {
  const synthetic = model.startsWith("synthetic:");
  const spec = synthetic ? model : userPath(model);
  if (!synthetic) {
    if (!existsSync(spec)) throw new InputError(`model folder ${spec} does not exist`);
    if (!statSync(spec).isDirectory()) throw new InputError(`model ${spec} is not a folder`);
  }
  let config: ModelConfig;
  try {
    config = resolveModelConfig(spec);
  } catch (err) {
    throw new InputError((err as Error).message);
  }
  if (!synthetic) {
    try {
      const ckpt = Checkpoint.open(spec);
      try {
        checkCheckpointTensors(config, ckpt);
      } finally {
        ckpt.close();
      }
    } catch (err) {
      throw new InputError((err as Error).message);
    }
  }
  return { spec, config };
}

/**
 * Resolves and checks `--model` as {@link checkedModel} does, and opens its tokenizer.
 * Throws InputError naming the problem.
 */
export function openModelSpec(model: string): ModelSpec {
  const { spec, config } = checkedModel(model);
  const synthetic = spec.startsWith("synthetic:");
  const own = synthetic ? null : join(spec, "tokenizer.json");
  const path = own && existsSync(own) ? own : qwen3TokenizerJsonPath();
  let tokenizer: ModelTokenizer;
  try {
    tokenizer = ModelTokenizer.fromFile(path);
  } catch (err) {
    throw new InputError((err as Error).message);
  }
  const tokenizerNote = path === own
    ? null
    : `${synthetic ? spec : `${spec} has no tokenizer.json`}: using the Qwen3 tokenizer`;
  return { spec, config, tokenizer, tokenizerNote };
}

/**
 * Checks token ids against the model's vocabulary; throws InputError naming the first id
 * outside [0, vocab) (`what` labels it: "prompt 2", "--token-ids").
 */
export function checkTokenIds(ids: ArrayLike<number>, config: ModelConfig, what: string): void {
  if (ids.length === 0) throw new InputError(`${what} is empty: no tokens to run`);
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (!Number.isInteger(id) || id < 0 || id >= config.vocabSize) {
      throw new InputError(
        `${what}: token id ${id} at index ${i} is outside the vocabulary [0, ${config.vocabSize}) of ${config.name}`,
      );
    }
  }
}

/** Tokenizes a prompt and checks it against the model's vocabulary (InputError if not). */
export function promptTokenIds(
  tokenizer: ModelTokenizer,
  config: ModelConfig,
  text: string,
  what = "the prompt",
): Int32Array {
  if (text.length === 0) throw new InputError(`${what} is empty`);
  const ids = tokenizer.encode(text);
  checkTokenIds(ids, config, what);
  return ids;
}

/**
 * Parses `--token-ids 1,2,3` (already split on commas) and checks every id against the
 * model's vocabulary; InputError on a non-integer or an id outside it.
 */
export function parseTokenIds(values: readonly string[], config: ModelConfig): Int32Array {
  const ids = values.map((v) => {
    const n = Number(v);
    if (v.trim() === "" || !Number.isInteger(n)) {
      throw new InputError(`--token-ids: '${v}' is not an integer token id`);
    }
    return n;
  });
  checkTokenIds(ids, config, "--token-ids");
  return Int32Array.from(ids);
}
