/**
 * Serves a set of tokenized prompts through the Engine at once (continuous batching:
 * every prompt is queued before the first step, so prefills and decodes share steps) and
 * reports each request's tokens as they arrive and its timings at the end.
 *
 * ```ts
 * const { requests } = await servePrompts(model, [ids0, ids1], {
 *   maxTokens: 16,
 *   onToken: (index, tokenId) => console.log(index, tokenId),
 * });
 * requests[1].outputTokenIds; // up to 16 ids
 * ```
 */
import { Engine } from "../engine/engine.ts";
import type { EngineConfig } from "../engine/engine_config.ts";
import type { FinishReason } from "../engine/request.ts";
import type { StepObservation } from "../engine/step_observation.ts";
import type { ForwardModel } from "../model/step_batch.ts";

/** What servePrompts needs of the model beyond ForwardModel (GpuModel has it). */
export interface ServingModel extends ForwardModel {
  /** Most tokens one step carries. */
  readonly maxNumTokens: number;
  /** Most sequences one step carries. */
  readonly maxNumSeqs: number;
}

/** How the prompts are served. */
export interface ServeOptions {
  /** Output tokens per request at most. */
  readonly maxTokens: number;
  /** 0 (default) = greedy. */
  readonly temperature?: number;
  /** Request i samples with seed `seed + i` (default 0). */
  readonly seed?: number;
  /** Keep generating past EOS (default false). */
  readonly ignoreEos?: boolean;
  /** Schedule step N+1 while step N runs (default false). */
  readonly asyncScheduling?: boolean;
  /**
   * Engine settings over the defaults: token budget min(2048, model.maxNumTokens), up to
   * model.maxNumSeqs requests running, max_model_len the model's.
   */
  readonly engine?: Partial<EngineConfig>;
  /** Called with every token as it arrives (request index, token id). */
  readonly onToken?: (index: number, tokenId: number) => void;
  /** Called with every completed step's observation. */
  readonly onStep?: (observation: StepObservation) => void;
}

/** One served request. */
export interface ServedRequest {
  readonly index: number;
  readonly numPromptTokens: number;
  /** Prompt tokens found in the prefix cache at admission. */
  readonly numCachedTokens: number;
  readonly outputTokenIds: readonly number[];
  readonly finishReason: FinishReason | null;
  /** ms from the first step's start to the first output token (null: none came). */
  readonly firstTokenMs: number | null;
  /** ms from the first step's start to the finish. */
  readonly finishMs: number;
}

/** The result of servePrompts. */
export interface ServeResult {
  readonly requests: readonly ServedRequest[];
  /** Engine steps taken. */
  readonly numSteps: number;
  /** ms from the first step's start until every request finished. */
  readonly wallMs: number;
}

/**
 * Queues every prompt, then steps the engine until all have finished. Throws before any
 * step, naming the prompt, when one is rejected (empty, a token outside the vocabulary,
 * not shorter than max_model_len, more KV blocks than the pool has).
 */
export async function servePrompts(
  model: ServingModel,
  prompts: readonly ArrayLike<number>[],
  options: ServeOptions,
): Promise<ServeResult> {
  const engine = new Engine(model, {
    maxNumBatchedTokens: Math.min(2048, model.maxNumTokens),
    maxNumSeqs: Math.min(256, model.maxNumSeqs),
    asyncScheduling: options.asyncScheduling ?? false,
    ...options.engine,
  });
  let t0 = 0;
  const firstTokenMs: (number | null)[] = prompts.map(() => null);
  const finishMs: number[] = prompts.map(() => 0);
  const requests = prompts.map((prompt, index) => {
    try {
      return engine.addRequest(prompt, {
        maxTokens: options.maxTokens,
        temperature: options.temperature ?? 0,
        seed: (options.seed ?? 0) + index,
        ignoreEos: options.ignoreEos ?? false,
      }, {
        requestId: `prompt-${index}`,
        onOutput: ({ tokenId, finished }) => {
          const now = performance.now() - t0;
          if (tokenId !== null) {
            firstTokenMs[index] ??= now;
            options.onToken?.(index, tokenId);
          }
          if (finished) finishMs[index] = now;
        },
      });
    } catch (err) {
      throw new Error(`prompt ${index}: ${(err as Error).message}`);
    }
  });
  let numSteps = 0;
  const unsubscribe = engine.onStep((observation) => {
    numSteps++;
    options.onStep?.(observation);
  });
  t0 = performance.now();
  try {
    await engine.runUntilDone();
  } finally {
    unsubscribe();
  }
  const wallMs = performance.now() - t0;
  return {
    requests: requests.map((r, index) => ({
      index,
      numPromptTokens: r.numPromptTokens,
      numCachedTokens: Math.max(0, r.numCachedTokens),
      outputTokenIds: r.outputTokenIds,
      finishReason: r.finishReason,
      firstTokenMs: firstTokenMs[index],
      finishMs: finishMs[index],
    })),
    numSteps,
    wallMs,
  };
}
