/**
 * The sampling params of one request (vLLM's SamplingParams: max_tokens, ignore_eos,
 * temperature, seed) and its `cache_salt`. Validated once and frozen.
 *
 * ```ts
 * const params = generationParams({ maxTokens: 32, cacheSalt: "bench-17" });
 * params.temperature; // 0: greedy
 * ```
 */
export interface GenerationParams {
  /** Output tokens to generate at most (>= 1). */
  readonly maxTokens: number;
  /** Keep generating past an EOS token (benchmark requests, chains, shadows). */
  readonly ignoreEos: boolean;
  /** 0 = greedy (argmax); > 0 samples. */
  readonly temperature: number;
  /** Seed of the request's generator; the model mixes in the position. */
  readonly seed: number;
  /** Salt that enters block 0's hash only, isolating the request's prefix cache; null for none. */
  readonly cacheSalt: string | null;
}

/** Defaults: 16 tokens, stop at EOS, greedy, seed 0, no salt. */
export const DEFAULT_GENERATION_PARAMS: GenerationParams = Object.freeze({
  maxTokens: 16,
  ignoreEos: false,
  temperature: 0,
  seed: 0,
  cacheSalt: null,
});

/** Fills defaults, validates every field (naming the bad one) and freezes. */
export function generationParams(partial: Partial<GenerationParams> = {}): GenerationParams {
  const p = { ...DEFAULT_GENERATION_PARAMS, ...partial };
  for (const key of Object.keys(partial)) {
    if (!(key in DEFAULT_GENERATION_PARAMS)) throw new Error(`unknown generation param "${key}"`);
  }
  if (!Number.isInteger(p.maxTokens) || p.maxTokens < 1) {
    throw new Error(`maxTokens must be an integer >= 1, got ${p.maxTokens}`);
  }
  if (typeof p.ignoreEos !== "boolean") throw new Error(`ignoreEos must be a boolean`);
  if (!(Number.isFinite(p.temperature) && p.temperature >= 0)) {
    throw new Error(`temperature must be a finite number >= 0, got ${p.temperature}`);
  }
  if (!Number.isInteger(p.seed)) throw new Error(`seed must be an integer, got ${p.seed}`);
  if (p.cacheSalt !== null && typeof p.cacheSalt !== "string") {
    throw new Error(`cacheSalt must be a string or null`);
  }
  return Object.freeze(p);
}
