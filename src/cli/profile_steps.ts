/**
 * Runs profiled steps of one shape through the engine: B requests at context C injected
 * with fake KV (`injectRunning`; a profile times kernels, the KV content does not matter),
 * then decode steps, or (with `prefillTokens`) prefill steps of T new tokens split over
 * the B requests by a balanced partition. The model must run in profile mode: every
 * dispatch in its own timed pass. One warm-up step first (pipelines compile lazily).
 *
 * ```ts
 * const steps = await profileSteps(engine, model, { batch: 8, ctx: 1024, steps: 3 });
 * summarizeSpans(steps);
 * ```
 */
import { InputError } from "./run_cli.ts";
import type { Engine } from "../engine/engine.ts";
import type { GpuModel } from "../model/gpu_model.ts";
import type { StepShape } from "../model/step_cost.ts";
import type { ProfiledStep } from "../report/kernel_timings.ts";
import { Rng } from "../util/rng.ts";

/** The shape to profile. */
export interface ProfileShape {
  /** Requests in the step. */
  readonly batch: number;
  /** Tokens each request has computed before the step (its KV depth). */
  readonly ctx: number;
  /** Total new prefill tokens of the step (balanced over the requests); absent: decode. */
  readonly prefillTokens?: number;
  /** Measured steps after the warm-up (default 3). */
  readonly steps?: number;
}

/** A profiled step with the shape the cost model priced. */
export interface ProfiledShapeStep extends ProfiledStep {
  readonly shape: StepShape;
}

/** Splits `total` over `n` parts, the remainder to the first ones. */
export function balancedPartition(total: number, n: number): number[] {
  const base = Math.floor(total / n);
  return Array.from({ length: n }, (_, i) => base + (i < total % n ? 1 : 0));
}

/** Checks a shape against the engine and model limits; throws naming the bad value. */
export function checkProfileShape(engine: Engine, shape: ProfileShape): void {
  const { batch, ctx } = shape;
  const T = shape.prefillTokens;
  if (!Number.isInteger(batch) || batch < 1) {
    throw new InputError(`--batch must be >= 1, got ${batch}`);
  }
  if (!Number.isInteger(ctx) || ctx < 0) throw new InputError(`--ctx must be >= 0, got ${ctx}`);
  if (batch > engine.config.maxNumSeqs) {
    throw new InputError(
      `--batch ${batch} exceeds the engine's ${engine.config.maxNumSeqs} sequences`,
    );
  }
  const steps = shape.steps ?? 3;
  if (T === undefined) {
    if (ctx < 1) throw new InputError("a decode profile needs --ctx >= 1");
    if (ctx + steps + 2 > engine.config.maxModelLen) {
      throw new InputError(
        `--ctx ${ctx} plus ${steps + 1} steps exceeds max_model_len ${engine.config.maxModelLen}`,
      );
    }
  } else {
    if (!Number.isInteger(T) || T < batch) {
      throw new InputError(`--prefill-tokens must be an integer >= --batch (${batch}), got ${T}`);
    }
    if (T > engine.config.maxNumBatchedTokens) {
      throw new InputError(
        `--prefill-tokens ${T} exceeds the step budget of ${engine.config.maxNumBatchedTokens} tokens`,
      );
    }
    const longest = ctx + Math.ceil(T / batch);
    if (longest + 1 > engine.config.maxModelLen) {
      throw new InputError(
        `a request of ${longest} tokens exceeds max_model_len ${engine.config.maxModelLen}`,
      );
    }
  }
}

/** Runs the warm-up and the measured steps; returns the measured ones. */
export async function profileSteps(
  engine: Engine,
  model: GpuModel,
  shape: ProfileShape,
): Promise<ProfiledShapeStep[]> {
  checkProfileShape(engine, shape);
  const steps = shape.steps ?? 3;
  const { batch, ctx } = shape;
  const vocab = model.vocabSize;
  const prompt = (seed: string, length: number) => {
    const rng = Rng.fromSeed(seed);
    return Int32Array.from({ length }, () => (vocab > 1 ? rng.int(1, vocab) : 0));
  };
  const inject = (rep: number, lengths: number[], maxTokens: number) =>
    lengths.map((len, i) => {
      const id = `profile-${rep}-${i}`;
      const req = engine.injectRunning(prompt(id, len), ctx, {
        maxTokens,
        ignoreEos: true,
        cacheSalt: id,
      }, { requestId: id });
      if (!req) throw new InputError(`the KV pool cannot hold ${batch} requests of ${len} tokens`);
      return req;
    });
  const measure = async (shapeOf: StepShape): Promise<ProfiledShapeStep> => {
    const obs = await engine.step();
    if (!obs) throw new Error("the engine scheduled nothing");
    const spans = await model.lastStepSpans();
    return {
      spans,
      shape: shapeOf,
      cost: model.stepCost(shapeOf).byLabel,
    };
  };
  const out: ProfiledShapeStep[] = [];
  if (shape.prefillTokens === undefined) {
    inject(0, Array(batch).fill(ctx + 1), steps + 2);
    for (let s = 0; s <= steps; s++) {
      const contextLen = ctx + 1 + s;
      const step = await measure({
        seqs: Array.from({ length: batch }, () => ({ queryLen: 1, contextLen })),
        sampledRows: batch,
      });
      if (s > 0) out.push(step);
    }
    for (let i = 0; i < batch; i++) {
      if (engine.getRequest(`profile-0-${i}`)) engine.shed(`profile-0-${i}`);
    }
  } else {
    const parts = balancedPartition(shape.prefillTokens, batch);
    for (let s = 0; s <= steps; s++) {
      inject(s, parts.map((p) => ctx + p), 1);
      const step = await measure({
        seqs: parts.map((p) => ({ queryLen: p, contextLen: ctx + p })),
        sampledRows: batch,
      });
      if (s > 0) out.push(step);
      for (let i = 0; i < batch; i++) {
        if (engine.getRequest(`profile-${s}-${i}`)) engine.shed(`profile-${s}-${i}`);
      }
    }
  }
  await engine.drain();
  return out;
}
