/**
 * The warm-up before any point: one prompt of 256 tokens (fewer when the step budget, the
 * model length or the KV pool is smaller) run for 5 steps (its prefill, then decodes),
 * untimed, so that the first point does not pay for first-use work. On a GPU the clocks come
 * up under load: without more, the first points of a run took up to 1.8x the GPU time of a warm
 * run (H200, 2026-12-02: a B32 decode point 44.2 ms a step in one run, 24.4 in another). So
 * `clockSeconds` (the bench's --warmup-s) then keeps the GPU busy with requests of up to 2048
 * prompt tokens (a prefill and one decode each, every one its own cache salt, cut to the pool's
 * room) until that long has passed since the warm-up began. Work the sweep must do before its
 * first point anyway (kvwarm's first stage: seconds of untimed prefill) runs between the warm-up
 * request and those requests, and its time counts toward `clockSeconds`: on the H200
 * (2026-12-02) the medium decode grid's B32 chains built in 4.5 s, so the 2 s clock warm-up that
 * came before them was idle GPU time's remedy run twice.
 *
 * ```ts
 * const shape = warmupShape(capacity, WARMUP, 2); // throws when the pool cannot hold it
 * const record = await warmUp(driver, content, salts, shape);
 * ```
 */
import type { BenchCapacity, ClockWarmupEnd, WarmupRecord } from "./artifact.ts";
import { ManifestError } from "./manifest.ts";
import type { PromptContent } from "./prompt_content.ts";
import type { SaltScheme } from "./salts.ts";
import type { StepDriver } from "./step_driver.ts";

/** The design's warm-up: 256 prompt tokens, 5 steps. */
export const WARMUP = Object.freeze({ promptTokens: 256, steps: 5 });

/** Prompt tokens of the clock warm-up's requests at most. */
export const CLOCK_PROMPT_TOKENS = 2048;

/** The bench's --warmup-s on a GPU adapter (0 on a CPU adapter, which has no clocks to raise). */
export const CLOCK_WARMUP_SECONDS = 2;

/** The warm-up's prompt tokens and steps, and its clock warm-up. */
export interface WarmupShape {
  readonly promptTokens: number;
  readonly steps: number;
  /** Seconds the warm-up lasts at least (0: the one request). */
  readonly clockSeconds?: number;
  /** Prompt tokens of each clock warm-up request (a prefill and one decode). */
  readonly clockPromptTokens?: number;
}

/**
 * The warm-up fitted to the envelope: its prompt shortened to the step budget, the model
 * length and the KV pool above the watermark (the prompt and its decode steps' tokens). A
 * pool or model length that cannot hold even a one-token warm-up is refused before anything
 * runs, as an input error (exit 2) naming what to raise.
 */
export function warmupShape(
  capacity: BenchCapacity,
  shape: WarmupShape = WARMUP,
  clockSeconds = 0,
): WarmupShape {
  if (!(clockSeconds >= 0)) throw new Error(`warm-up: clockSeconds ${clockSeconds} must be >= 0`);
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
  if (clockSeconds === 0) return { promptTokens, steps: shape.steps };
  const clockPromptTokens = Math.max(
    1,
    Math.min(
      CLOCK_PROMPT_TOKENS,
      capacity.max_batched_tokens,
      capacity.max_model_len - 2,
      poolTokens - 2,
    ),
  );
  return { promptTokens, steps: shape.steps, clockSeconds, clockPromptTokens };
}

/**
 * Runs the warm-up request (a shape from warmupShape) to completion, then (with a clock
 * warm-up) `beforeClock`, then the clock warm-up's requests one after another until
 * `clockSeconds` have passed since the warm-up began, `beforeClock`'s time included; says what
 * it ran. `stop` is asked after `beforeClock` and after each clock request whether the warm-up
 * ends, with this rank's answer: ranks in lockstep (whose steps meet at a barrier) must run the
 * same requests, so the group decides (the sweep's soft timeout votes there too). The record
 * says what ended it (`ended`). The record's `seconds` leave `beforeClock` out (its work
 * is recorded where it belongs: a kvwarm stage's build_seconds); `clock.counted_seconds` says
 * how much of it counted.
 */
export async function warmUp(
  driver: StepDriver,
  content: PromptContent,
  salts: SaltScheme,
  shape: WarmupShape,
  stop: (timeUp: boolean) => Promise<boolean> = (timeUp) => Promise.resolve(timeUp),
  beforeClock?: () => Promise<void>,
): Promise<WarmupRecord> {
  const t0 = performance.now();
  const seq0 = driver.seq;
  const run = async (round: number, tokens: number, steps: number) => {
    const salt = salts.cacheSalt(0, "warmup", round, 0);
    driver.engine.addRequest(
      content.tokens("warmup", tokens),
      { maxTokens: steps, ignoreEos: true, cacheSalt: salt },
      { requestId: salt },
    );
    await driver.drain();
  };
  await run(0, shape.promptTokens, shape.steps);
  const steps = driver.seq - seq0;
  const clockSeconds = shape.clockSeconds ?? 0;
  let countedMs = 0;
  if (clockSeconds > 0 && beforeClock) {
    const ts = performance.now();
    await beforeClock();
    countedMs = performance.now() - ts;
  }
  const seq1 = driver.seq;
  let rounds = 0;
  const t1 = performance.now();
  const clockTokens = () => roomFor(driver, shape.clockPromptTokens ?? shape.promptTokens);
  // this rank's reason to end: its time, or a pool without room for a request (kvwarm's chains
  // parked in it); the group's vote may end it without one ("stop")
  const ownEnd = (): ClockWarmupEnd | null =>
    performance.now() - t0 >= clockSeconds * 1000 ? "time" : clockTokens() < 1 ? "pool" : null;
  let ended: ClockWarmupEnd = "time";
  const stops = async () => {
    const own = ownEnd();
    const stopped = await stop(own !== null);
    if (stopped) ended = own ?? "stop";
    return stopped;
  };
  if (clockSeconds > 0 && !(await stops())) {
    do {
      await run(++rounds, clockTokens(), 2);
    } while (!(await stops()));
  }
  return {
    prompt_tokens: shape.promptTokens,
    steps,
    seconds: (performance.now() - t0 - countedMs) / 1000,
    clock: clockSeconds > 0
      ? {
        min_seconds: clockSeconds,
        prompt_tokens: shape.clockPromptTokens ?? shape.promptTokens,
        requests: rounds,
        steps: driver.seq - seq1,
        seconds: (performance.now() - t1) / 1000,
        counted_seconds: countedMs / 1000,
        ended,
      }
      : null,
  };
}

/**
 * Prompt tokens, at most `wanted`, of a request of a prefill and one decode that the pool holds
 * now above the watermark (blocks parked by kvwarm's first stage are not free); below 1 when
 * none fits.
 */
function roomFor(driver: StepDriver, wanted: number): number {
  const kv = driver.engine.kv;
  const u = kv.usage();
  // every KV group takes its own blocks of the one pool
  const blocks = Math.floor((u.free - u.watermarkBlocks) / kv.numGroups);
  return Math.min(wanted, blocks * kv.blockSize - 1);
}
