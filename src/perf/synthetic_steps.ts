/**
 * Step batches for model-level performance runs, without the engine: `batch` sequences
 * whose KV cache already holds `ctx - 1` tokens (whatever the blocks contain: these runs
 * time kernels, they do not judge outputs), each owning consecutive blocks. Decode steps
 * feed each sequence its previous sampled token on the GPU (prevSampleRef), as serving does.
 *
 * ```ts
 * const steps = new SyntheticDecode(model, 64, 1024);
 * model.forward(steps.next()); // contexts 1024, then 1025, ...
 * ```
 */
import type { ForwardModel, StepBatch } from "../model/step_batch.ts";

/** Blocks a point needs, or an error message when the pool is too small. */
export function blocksNeeded(model: ForwardModel, batch: number, maxContext: number): number {
  return batch * Math.ceil(maxContext / model.blockSize);
}

/** Consecutive decode steps of `batch` sequences starting at context `ctx`. */
export class SyntheticDecode {
  private step = 0;
  private readonly tables: Int32Array[];
  private readonly blocksPerSeq: number;

  constructor(
    private readonly model: ForwardModel,
    readonly batch: number,
    readonly ctx: number,
    readonly maxSteps = 64,
  ) {
    this.blocksPerSeq = Math.ceil((ctx + maxSteps) / model.blockSize);
    const need = batch * this.blocksPerSeq;
    if (need > model.numBlocks - 1) {
      throw new Error(
        `${batch} x ${ctx} needs ${need} KV blocks, the pool has ${model.numBlocks - 1}`,
      );
    }
    if (ctx + maxSteps > model.maxModelLen) {
      throw new Error(
        `context ${ctx} + ${maxSteps} steps exceeds max model length ${model.maxModelLen}`,
      );
    }
    this.tables = Array.from(
      { length: batch },
      (_, s) =>
        Int32Array.from({ length: this.blocksPerSeq }, (_, b) => 1 + s * this.blocksPerSeq + b),
    );
  }

  /** The next decode step: every sequence adds one token at position ctx - 1 + step. */
  next(): StepBatch {
    if (this.step >= this.maxSteps) {
      throw new Error(`SyntheticDecode: more than ${this.maxSteps} steps`);
    }
    const B = this.batch, bs = this.model.blockSize;
    const pos = this.ctx - 1 + this.step;
    const first = this.step === 0;
    const tokenIds = new Int32Array(B);
    for (let s = 0; s < B; s++) tokenIds[s] = 1 + ((s * 7919 + 17) % (this.model.vocabSize - 1));
    const batch: StepBatch = {
      tokenIds,
      prevSampleRef: Int32Array.from({ length: B }, (_, s) => (first ? -1 : s)),
      positions: new Int32Array(B).fill(pos),
      seqs: this.tables.map((table, s) => ({
        queryStart: s,
        queryLen: 1,
        contextLen: pos + 1,
        blockTable: table,
      })),
      slotMapping: Int32Array.from(
        this.tables,
        (table) => table[Math.floor(pos / bs)] * bs + (pos % bs),
      ),
      sampleTokenIndices: Int32Array.from({ length: B }, (_, s) => s),
      sampling: Array.from({ length: B }, () => ({ temperature: 0, seed: 0 })),
      blockCopies: [],
    };
    this.step++;
    return batch;
  }
}

/**
 * One prefill step of `batch` sequences of `tokens` new tokens each, with `prefix` tokens
 * already cached before them.
 */
export function syntheticPrefill(
  model: ForwardModel,
  batch: number,
  tokens: number,
  prefix = 0,
): StepBatch {
  const bs = model.blockSize;
  const ctx = prefix + tokens;
  const blocksPerSeq = Math.ceil(ctx / bs);
  if (batch * blocksPerSeq > model.numBlocks - 1) {
    throw new Error(
      `${batch} x ${ctx} needs ${batch * blocksPerSeq} KV blocks, the pool has ${
        model.numBlocks - 1
      }`,
    );
  }
  const T = batch * tokens;
  const tokenIds = new Int32Array(T);
  const positions = new Int32Array(T);
  const slotMapping = new Int32Array(T);
  const seqs = [];
  for (let s = 0; s < batch; s++) {
    const table = Int32Array.from({ length: blocksPerSeq }, (_, b) => 1 + s * blocksPerSeq + b);
    for (let i = 0; i < tokens; i++) {
      const t = s * tokens + i, pos = prefix + i;
      tokenIds[t] = 1 + ((t * 7919 + 17) % (model.vocabSize - 1));
      positions[t] = pos;
      slotMapping[t] = table[Math.floor(pos / bs)] * bs + (pos % bs);
    }
    seqs.push({ queryStart: s * tokens, queryLen: tokens, contextLen: ctx, blockTable: table });
  }
  return {
    tokenIds,
    prevSampleRef: new Int32Array(T).fill(-1),
    positions,
    seqs,
    slotMapping,
    sampleTokenIndices: Int32Array.from({ length: batch }, (_, s) => s * tokens + tokens - 1),
    sampling: Array.from({ length: batch }, () => ({ temperature: 0, seed: 0 })),
    blockCopies: [],
  };
}
