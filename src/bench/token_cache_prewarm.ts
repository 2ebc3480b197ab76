/**
 * Fills a token cache (token_cache.ts) with the texts the real-text pool and kvwarm's chains
 * ask the Qwen3 tokenizer for: the pool's chunks (text_pool.ts) and every collection
 * conversation as a chain takes it (chain_content.ts's chainText). The offline bundle ships the
 * file it writes, so a fresh GPU host's first run with `--content text` or kvwarm neither loads
 * the vocabulary nor tokenizes: on the H200 (2026-12-02) that first run paid 1.3 s for the
 * medium decode grid and 2.9 s at a max-model-len of 8192 (409,235 tokens of chains).
 * The ids are the tokenizer's: the cache file is named by the tokenizer's files and the
 * library's version, so another tokenizer (or version) never reads them.
 *
 * ```ts
 * prewarmTokenCache(join(app, ".cache", "tokens")); // the whole collection, both ways
 * ```
 */
import { chainText } from "./kvwarm/chain_content.ts";
import { loadCollection, loadTextPool } from "./text_pool.ts";
import { cachedTokenizer, tokenCacheFile } from "./token_cache.ts";
import { ModelTokenizer, qwen3TokenizerJsonPath } from "../model/tokenizer.ts";
import { syntheticConfig } from "../model/config.ts";

/** How much of the collection to tokenize (default: all of it, both ways). */
export interface PrewarmOptions {
  /** Tokens of the real-text pool (its chunks in order until this many). */
  readonly poolTokens?: number;
  /** Collection conversations, from the first, tokenized as chains take them. */
  readonly chainBodies?: number;
  /** The vocabulary every id must be below (default: synthetic:qwen3-30b-a3b's). */
  readonly vocabSize?: number;
}

/** What the prewarm wrote. */
export interface PrewarmRecord {
  readonly file: string;
  readonly poolTokens: number;
  readonly chainBodies: number;
  readonly chainTokens: number;
  readonly seconds: number;
}

/** Tokenizes into the cache in `dir` (see the module doc above). */
export function prewarmTokenCache(dir: string, options: PrewarmOptions = {}): PrewarmRecord {
  const t0 = performance.now();
  const json = qwen3TokenizerJsonPath();
  const tokenizer = cachedTokenizer(json, () => ModelTokenizer.fromFile(json), dir);
  const vocabSize = options.vocabSize ?? syntheticConfig("synthetic:qwen3-30b-a3b").vocabSize;
  const pool = loadTextPool(tokenizer, {
    minTokens: options.poolTokens ?? Number.POSITIVE_INFINITY,
    vocabSize,
  });
  const { collection } = loadCollection();
  const n = Math.min(collection.length, options.chainBodies ?? collection.length);
  let chainTokens = 0;
  for (let i = 0; i < n; i++) chainTokens += tokenizer.encode(chainText(collection[i])).length;
  tokenizer.flush?.();
  return {
    file: tokenCacheFile(dir, json),
    poolTokens: pool.tokens.length,
    chainBodies: n,
    chainTokens,
    seconds: (performance.now() - t0) / 1000,
  };
}
