/**
 * Prompt token content, chosen by a content salt: random tokens uniform in
 * `[1, vocab_size)` from a generator seeded by `content-v1:{seed}:dp{rank}:{salt}`,
 * windows of a real-text token pool starting at an offset drawn from that seed
 * (wrapping around), or zeros. In every mode the same salt with a longer length gives a
 * strict extension (the prefix property), so a seeding request and its measuring
 * request share block hashes. Random content over a vocabulary of one token or less
 * falls back to zeros, and says so.
 *
 * ```ts
 * const content = randomContent(151936, "0", 0);
 * const a = content.tokens("decode:B8:K64:0", 16);
 * const b = content.tokens("decode:B8:K64:0", 32); // b.subarray(0, 16) equals a
 * ```
 */
import type { ContentMode } from "./artifact.ts";
import { contentSeedString } from "./salts.ts";
import { Rng } from "../util/rng.ts";

/** A source of prompt tokens. */
export interface PromptContent {
  /** The mode actually used. */
  readonly mode: ContentMode;
  /** True when random content fell back to zeros. */
  readonly zerosFallback: boolean;
  /** Why the mode differs from the one asked for, or null. */
  readonly fallbackReason: string | null;
  /** `length` tokens for `salt` (a prefix of any longer request for the same salt). */
  tokens(salt: string, length: number): Int32Array;
}

/** Uniform tokens in `[1, vocabSize)`; zeros (flagged) when `vocabSize <= 1`. */
export function randomContent(vocabSize: number, contentSeed: string, rank: number): PromptContent {
  if (!(vocabSize > 1)) {
    return {
      ...zerosContent(),
      zerosFallback: true,
      fallbackReason: `vocab_size ${vocabSize} <= 1: random tokens in [1, vocab_size) impossible`,
    };
  }
  return {
    mode: "random",
    zerosFallback: false,
    fallbackReason: null,
    tokens(salt, length) {
      const rng = Rng.fromSeed(contentSeedString(contentSeed, rank, salt));
      const out = new Int32Array(length);
      for (let i = 0; i < length; i++) out[i] = rng.int(1, vocabSize);
      return out;
    },
  };
}

/** All-zero tokens. */
export function zerosContent(): PromptContent {
  return {
    mode: "zeros",
    zerosFallback: false,
    fallbackReason: null,
    tokens: (_salt, length) => new Int32Array(length),
  };
}

/** Windows of `pool` starting at an offset drawn from the salt's seed, wrapping around. */
export function textContent(pool: Int32Array, contentSeed: string, rank: number): PromptContent {
  if (pool.length === 0) throw new Error("the real-text token pool is empty");
  return {
    mode: "text",
    zerosFallback: false,
    fallbackReason: null,
    tokens(salt, length) {
      const start = Rng.fromSeed(contentSeedString(contentSeed, rank, salt)).int(0, pool.length);
      const out = new Int32Array(length);
      for (let i = 0; i < length; i++) out[i] = pool[(start + i) % pool.length];
      return out;
    },
  };
}
