import type { ForwardModel } from "../model/step_batch.ts";

/**
 * The engine's configuration: validated once against the model and frozen. Values the
 * model decides (block size, pool size, vocabulary) are read from the model, not
 * configured.
 *
 * ```ts
 * const config = engineConfig(model, { maxNumSeqs: 64, asyncScheduling: true });
 * ```
 */
export interface EngineConfig {
  /** Token budget of one step, summed over requests (chunked prefill splits prompts to fit). */
  readonly maxNumBatchedTokens: number;
  /** Requests in `running` at most. */
  readonly maxNumSeqs: number;
  /** Prompt plus output tokens of one request at most (<= the model's). */
  readonly maxModelLen: number;
  /** Reuse cached full blocks across requests. */
  readonly enablePrefixCaching: boolean;
  /** Split a prompt over several steps when it exceeds the remaining budget. */
  readonly enableChunkedPrefill: boolean;
  /**
   * Schedule step N+1 before step N's sampled tokens arrive (its decode inputs refer to
   * step N's output on the GPU). Gives the same tokens as the synchronous loop.
   */
  readonly asyncScheduling: boolean;
  /** Fraction of usable KV blocks a newly admitted request must leave free. */
  readonly watermark: number;
}

const DEFAULTS = {
  maxNumBatchedTokens: 2048,
  maxNumSeqs: 256,
  enablePrefixCaching: true,
  enableChunkedPrefill: true,
  asyncScheduling: false,
  watermark: 0.01,
};

/** Fills defaults, validates against `model` (naming the bad field) and freezes. */
export function engineConfig(
  model: Pick<ForwardModel, "maxModelLen" | "maxNumTokens" | "maxNumSeqs">,
  partial: Partial<EngineConfig> = {},
): EngineConfig {
  for (const key of Object.keys(partial)) {
    if (!(key in DEFAULTS) && key !== "maxModelLen") {
      throw new Error(`unknown engine config field "${key}"`);
    }
  }
  // Defaults never exceed what the model's step can carry; explicit values must fit it.
  const defaults = {
    ...DEFAULTS,
    maxNumBatchedTokens: Math.min(DEFAULTS.maxNumBatchedTokens, model.maxNumTokens ?? Infinity),
    maxNumSeqs: Math.min(DEFAULTS.maxNumSeqs, model.maxNumSeqs ?? Infinity),
  };
  const c: EngineConfig = { ...defaults, maxModelLen: model.maxModelLen, ...partial };
  const positiveInt = (name: keyof EngineConfig) => {
    const v = c[name];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 1) {
      throw new Error(`${name} must be a positive integer, got ${v}`);
    }
  };
  positiveInt("maxNumBatchedTokens");
  positiveInt("maxNumSeqs");
  positiveInt("maxModelLen");
  if (c.maxModelLen > model.maxModelLen) {
    throw new Error(`maxModelLen ${c.maxModelLen} exceeds the model's ${model.maxModelLen}`);
  }
  if (c.maxModelLen < 2) throw new Error(`maxModelLen must be >= 2, got ${c.maxModelLen}`);
  if (model.maxNumTokens !== undefined && c.maxNumBatchedTokens > model.maxNumTokens) {
    throw new Error(
      `maxNumBatchedTokens ${c.maxNumBatchedTokens} exceeds the ${model.maxNumTokens} tokens the model's step holds`,
    );
  }
  if (model.maxNumSeqs !== undefined && c.maxNumSeqs > model.maxNumSeqs) {
    throw new Error(
      `maxNumSeqs ${c.maxNumSeqs} exceeds the ${model.maxNumSeqs} sequences the model's step holds`,
    );
  }
  for (const name of ["enablePrefixCaching", "enableChunkedPrefill", "asyncScheduling"] as const) {
    if (typeof c[name] !== "boolean") throw new Error(`${name} must be a boolean`);
  }
  if (!c.enableChunkedPrefill && c.maxNumBatchedTokens < c.maxModelLen) {
    throw new Error(
      `without chunked prefill maxNumBatchedTokens (${c.maxNumBatchedTokens}) must be >= ` +
        `maxModelLen (${c.maxModelLen}), or a long request could never be scheduled`,
    );
  }
  if (!(c.watermark >= 0 && c.watermark < 1)) {
    throw new Error(`watermark must be a fraction in [0, 1), got ${c.watermark}`);
  }
  return Object.freeze(c);
}
