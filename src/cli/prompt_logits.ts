/**
 * The logits of every position of one prompt, by prefill steps of at most `chunk` tokens
 * (chunked prefill: each step reads the KV the earlier ones wrote). The prompt runs as one
 * sequence in KV blocks 1, 2, ... (block 0 is the model's null block).
 *
 * ```
 * 10 tokens, block_size 4, chunk 4:   blocks [1, 2, 3]
 * step 1  positions 0..3   contextLen 4    logits rows 0..3
 * step 2  positions 4..7   contextLen 8    logits rows 4..7
 * step 3  positions 8..9   contextLen 10   logits rows 8..9
 * ```
 *
 * ```ts
 * await promptLogits(model, ids, { onChunk: (start, logits) => out.write(logits) });
 * ```
 */
import type { ForwardModel, StepBatch } from "../model/step_batch.ts";

/** What promptLogits needs of the model (GpuModel has it all). */
export interface LogitsModel extends ForwardModel {
  /** Most tokens one step carries. */
  readonly maxNumTokens: number;
  /** Most rows whose logits one step can return. */
  readonly maxLogitRows: number;
}

/** Options of promptLogits. */
export interface PromptLogitsOptions {
  /** Most prompt tokens per step (default and cap: the model's maxNumTokens and maxLogitRows). */
  readonly maxStepTokens?: number;
  /** Called in order with each step's first position and its logits [tokens, vocab]. */
  readonly onChunk: (start: number, logits: Float32Array) => void;
}

/** Tokens per prefill step for a model and an optional cap. */
export function logitsChunkSize(model: LogitsModel, maxStepTokens?: number): number {
  const cap = Math.min(model.maxNumTokens, model.maxLogitRows);
  if (maxStepTokens === undefined) return cap;
  if (!Number.isInteger(maxStepTokens) || maxStepTokens < 1) {
    throw new Error(`maxStepTokens must be a positive integer, got ${maxStepTokens}`);
  }
  return Math.min(cap, maxStepTokens);
}

/**
 * Runs `ids` as one prompt (positions 0..n-1) and hands every position's logits to
 * `onChunk`; returns the number of steps. Throws, naming the limit, when the prompt is
 * empty, longer than the model length, or needs more KV blocks than the model has.
 */
export async function promptLogits(
  model: LogitsModel,
  ids: Int32Array,
  options: PromptLogitsOptions,
): Promise<number> {
  const n = ids.length;
  if (n === 0) throw new Error("promptLogits: the prompt is empty");
  if (n > model.maxModelLen) {
    throw new Error(`the prompt has ${n} tokens, more than the model length ${model.maxModelLen}`);
  }
  const bs = model.blockSize;
  const numBlocks = Math.ceil(n / bs);
  if (numBlocks + 1 > model.numBlocks) {
    throw new Error(
      `the prompt needs ${numBlocks} KV blocks of ${bs} tokens; the model has ${
        model.numBlocks - 1
      } besides the null block`,
    );
  }
  const table = Int32Array.from({ length: numBlocks }, (_, i) => i + 1);
  const chunk = logitsChunkSize(model, options.maxStepTokens);
  let steps = 0;
  for (let start = 0; start < n; start += chunk) {
    const len = Math.min(chunk, n - start);
    const end = start + len;
    const positions = Int32Array.from({ length: len }, (_, i) => start + i);
    const batch: StepBatch = {
      tokenIds: ids.slice(start, end),
      prevSampleRef: new Int32Array(len).fill(-1),
      positions,
      seqs: [{
        queryStart: 0,
        queryLen: len,
        contextLen: end,
        blockTable: table.subarray(0, Math.ceil(end / bs)),
      }],
      slotMapping: positions.map((p) => table[Math.floor(p / bs)] * bs + (p % bs)),
      sampleTokenIndices: Int32Array.from({ length: len }, (_, i) => i),
      sampling: Array.from({ length: len }, () => ({ temperature: 0, seed: 0 })),
      blockCopies: [],
      logits: true,
    };
    const out = model.forward(batch);
    if (!out.logits) throw new Error("promptLogits: the model returned no logits");
    const logits = await out.logits;
    if (logits.length !== len * model.vocabSize) {
      throw new Error(
        `promptLogits: step ${steps} returned ${logits.length} logits, expected ${len} x ${model.vocabSize}`,
      );
    }
    options.onChunk(start, logits);
    steps++;
  }
  return steps;
}
