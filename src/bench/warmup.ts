/**
 * The warm-up before any point: one prompt of 256 tokens (fewer when the step budget, the
 * model length or the KV pool is smaller) run for 5 steps (its prefill, then decodes),
 * untimed, so that the first point does not pay for first-use work.
 *
 * ```ts
 * const shape = warmupShape(capacity);             // throws when the pool cannot hold it
 * const record = await warmUp(driver, content, salts, shape);
 * ```
 */
import type { BenchCapacity, WarmupRecord } from "./artifact.ts";
import { ManifestError } from "./manifest.ts";
import type { PromptContent } from "./prompt_content.ts";
import type { SaltScheme } from "./salts.ts";
import type { StepDriver } from "./step_driver.ts";

/** The design's warm-up: 256 prompt tokens, 5 steps. */
export const WARMUP = Object.freeze({ promptTokens: 256, steps: 5 });

/** The warm-up's prompt tokens and steps. */
export interface WarmupShape {
  readonly promptTokens: number;
  readonly steps: number;
}

/**
 * The warm-up fitted to the envelope: its prompt shortened to the step budget, the model
 * length and the KV pool above the watermark (the prompt and its decode steps' tokens). A
 * pool or model length that cannot hold even a one-token warm-up is refused before anything
 * runs, as an input error (exit 2) naming what to raise.
 */
export function warmupShape(capacity: BenchCapacity, shape: WarmupShape = WARMUP): WarmupShape {
  const poolTokens = capacity.usable_blocks * capacity.block_size;
  const promptTokens = Math.min(
    shape.promptTokens,
    capacity.max_batched_tokens,
    capacity.max_model_len - shape.steps - 1,
    poolTokens - shape.steps,
  );
  if (promptTokens < 1) {
    const fix = [
      ...(poolTokens - shape.steps < 1 ? ["--kv-cache-gb"] : []),
      ...(capacity.max_model_len - shape.steps - 1 < 1 ? ["--max-model-len"] : []),
    ];
    throw new ManifestError("the engine's envelope", [
      `warm-up: a request of 1 prompt token and ${shape.steps} steps does not fit: the KV ` +
      `pool holds ${poolTokens} tokens above the watermark (${capacity.usable_blocks} ` +
      `blocks of ${capacity.block_size}) and max_model_len is ${capacity.max_model_len}; ` +
      `raise ${fix.join(" or ")}`,
    ]);
  }
  return { promptTokens, steps: shape.steps };
}

/** Runs the warm-up request (a shape from warmupShape) to completion; says what it ran. */
export async function warmUp(
  driver: StepDriver,
  content: PromptContent,
  salts: SaltScheme,
  shape: WarmupShape,
): Promise<WarmupRecord> {
  const engine = driver.engine;
  const tokens = shape.promptTokens;
  const t0 = performance.now();
  const seq0 = driver.seq;
  engine.addRequest(
    content.tokens("warmup", tokens),
    { maxTokens: shape.steps, ignoreEos: true, cacheSalt: salts.cacheSalt(0, "warmup", 0, 0) },
    { requestId: salts.cacheSalt(0, "warmup", 0, 0) },
  );
  await driver.drain();
  return {
    prompt_tokens: tokens,
    steps: driver.seq - seq0,
    seconds: (performance.now() - t0) / 1000,
  };
}
