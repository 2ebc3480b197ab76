/**
 * The warm-up before any point: one prompt of 256 tokens (fewer when the step budget or
 * the model length is smaller) run for 5 steps (its prefill, then decodes), untimed, so
 * that the first point does not pay for first-use work.
 *
 * ```ts
 * const record = await warmUp(driver, content, salts);
 * ```
 */
import type { WarmupRecord } from "./artifact.ts";
import type { PromptContent } from "./prompt_content.ts";
import type { SaltScheme } from "./salts.ts";
import type { StepDriver } from "./step_driver.ts";

/** The design's warm-up: 256 prompt tokens, 5 steps. */
export const WARMUP = Object.freeze({ promptTokens: 256, steps: 5 });

/** Runs the warm-up request to completion and says what it ran. */
export async function warmUp(
  driver: StepDriver,
  content: PromptContent,
  salts: SaltScheme,
  shape: { readonly promptTokens: number; readonly steps: number } = WARMUP,
): Promise<WarmupRecord> {
  const engine = driver.engine;
  const tokens = Math.max(
    1,
    Math.min(
      shape.promptTokens,
      engine.config.maxNumBatchedTokens,
      engine.config.maxModelLen - shape.steps - 1,
    ),
  );
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
