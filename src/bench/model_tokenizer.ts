/**
 * The tokenizer of the model being measured, for real-text prompts: `DIR/tokenizer.json`
 * for a checkpoint folder, the real Qwen3 tokenizer for `synthetic:qwen3-*`; anything
 * else has none (`tokenizer_unavailable:<why>`). A tokenizer of the same spec that someone
 * still holds is handed out again (loading the Qwen3 vocabulary takes about a second); the
 * cache itself keeps none alive, since a held tokenizer makes every full collection
 * slower (about 50 ms on lavapipe's host).
 *
 * ```ts
 * const tok = modelTokenizer("synthetic:qwen3-30b-a3b");
 * ```
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ModelTokenizer, qwen3TokenizerJsonPath } from "../model/tokenizer.ts";
import { type PoolTokenizer, TextPoolError } from "./text_pool.ts";
import { cachedTokenizer } from "./token_cache.ts";
import { heldCache } from "../util/held_cache.ts";

/** The tokenizer for `--model` (a folder or `synthetic:NAME`). */
export const modelTokenizer: (spec: string) => ModelTokenizer = heldCache(loadModelTokenizer);

/**
 * The same behind the token cache (token_cache.ts), for the real-text pool and kvwarm's
 * chains: its vocabulary loads only at the first text that no run before tokenized.
 */
export const modelPoolTokenizer: (spec: string) => PoolTokenizer = heldCache((spec: string) => {
  const json = tokenizerJson(spec);
  try {
    return cachedTokenizer(json, () => modelTokenizer(spec));
  } catch (err) {
    throw new TextPoolError("tokenizer_unavailable:load_failed", (err as Error).message);
  }
});

/** The tokenizer.json of `--model`; a TextPoolError when it has none. */
function tokenizerJson(spec: string): string {
  if (spec.startsWith("synthetic:qwen3")) return qwen3TokenizerJsonPath();
  if (spec.startsWith("synthetic:")) {
    throw new TextPoolError("tokenizer_unavailable:synthetic_model", `${spec} ships no tokenizer`);
  }
  const json = join(spec, "tokenizer.json");
  if (!existsSync(json)) {
    throw new TextPoolError("tokenizer_unavailable:missing", `${spec} has no tokenizer.json`);
  }
  return json;
}

function loadModelTokenizer(spec: string): ModelTokenizer {
  const json = tokenizerJson(spec);
  try {
    return ModelTokenizer.fromFile(json);
  } catch (err) {
    throw new TextPoolError("tokenizer_unavailable:load_failed", (err as Error).message);
  }
}
