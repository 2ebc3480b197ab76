/**
 * The plain description of one forward step: what the engine's scheduler emits and the
 * only thing the model consumes. It knows nothing of requests, salts or scheduling.
 *
 * Layout of one step with two sequences (block_size 4), the first decoding one token at
 * position 9, the second prefilling 3 new tokens after a cached prefix of 4:
 * ```
 * tokens     [ t9 | u4 u5 u6 ]            numTokens = 4
 * positions  [  9 |  4  5  6 ]
 * seqs[0]    queryStart 0, queryLen 1, contextLen 10, blockTable [7, 3, 12]
 * seqs[1]    queryStart 1, queryLen 3, contextLen 7,  blockTable [5, 9]
 * slotMapping[i] = blockTable[pos / 4] * 4 + pos % 4   (where token i's K/V is written)
 * sampleTokenIndices [0, 3]                (last token of each sequence that samples)
 * ```
 */
export interface StepSequence {
  /** Index of the sequence's first new token in the flattened token arrays. */
  readonly queryStart: number;
  /** Number of new tokens of this sequence in this step (>= 1). */
  readonly queryLen: number;
  /** Tokens whose K/V exist after this step: cached/computed before + queryLen. */
  readonly contextLen: number;
  /** Physical KV block ids covering positions [0, contextLen), in order. */
  readonly blockTable: Int32Array;
}

/** How a sampled token is drawn. temperature 0 = greedy (argmax). */
export interface SamplingParams {
  readonly temperature: number;
  /** Seed of the per-request generator; the step mixes in the position. */
  readonly seed: number;
}

export interface StepBatch {
  /** [numTokens] input token ids; entries with `prevSampleRef[i] >= 0` are ignored. */
  readonly tokenIds: Int32Array;
  /**
   * [numTokens] -1, or the index j into the previous step's sampled tokens whose value
   * is this input token (it stays on the GPU: no read-back is needed to start a step).
   */
  readonly prevSampleRef: Int32Array;
  /** [numTokens] absolute position of each token in its sequence. */
  readonly positions: Int32Array;
  readonly seqs: readonly StepSequence[];
  /** [numTokens] KV slot (block * blockSize + offset) each token's K/V is written to. */
  readonly slotMapping: Int32Array;
  /** Flattened token indices whose logits are sampled, in output order. */
  readonly sampleTokenIndices: Int32Array;
  /** One per entry of sampleTokenIndices. */
  readonly sampling: readonly SamplingParams[];
  /** KV block copies [src, dst] that must happen before this step's attention (CoW forks). */
  readonly blockCopies: readonly (readonly [number, number])[];
  /**
   * KV blocks whose K and V (every layer) are zeroed before the step's copies and
   * attention: the first tail block of a shadow registered without copy-on-write.
   */
  readonly blockZeros?: readonly number[];
  /**
   * Also return the f32 logits `[sampled rows, vocab]` (to get every position's logits,
   * sample every position, as `deno task logits` does).
   */
  readonly logits?: boolean;
  /**
   * Submit the step's commands at once even with no step in flight, where a model would
   * submit them in groups so the GPU starts early (GpuModelOptions.submitLayers): a
   * benchmark's untimed admission step, whose early finish would otherwise land while the host
   * encodes the first timed step, and be seen late (Engine.step's `oneSubmit`).
   */
  readonly oneSubmit?: boolean;
}

/** What a forward step hands back; the promises settle when the GPU is done. */
export interface StepOutput {
  /** Sampled token ids, one per sampleTokenIndices entry. */
  readonly sampled: Promise<Int32Array>;
  /** [rows, vocab] when StepBatch.logits was set. */
  readonly logits?: Promise<Float32Array>;
  /** GPU time of the step in ms from timestamp queries, or null when unavailable. */
  readonly gpuMs: Promise<number | null>;
  /**
   * Host ms forward() spent in `queue.submit` (Dawn records the step's Vulkan commands there),
   * where the model measures it: the rest of forward() is planning and encoding.
   */
  readonly submitCallMs?: number;
}

/** The model as the engine sees it. */
export interface ForwardModel {
  readonly blockSize: number;
  readonly numBlocks: number;
  readonly vocabSize: number;
  readonly maxModelLen: number;
  readonly eosTokenIds: readonly number[];
  /** Most tokens one step may carry (the engine's token budget must fit), if limited. */
  readonly maxNumTokens?: number;
  /** Most sequences one step may carry, if limited. */
  readonly maxNumSeqs?: number;
  forward(batch: StepBatch): StepOutput;
  /**
   * Encodes a step without submitting it (in one submit, as `oneSubmit`), so that a caller can
   * encode the next step too before the GPU starts this one; `launch` makes its writes and
   * submits it. Prepared steps launch in the order they were prepared, and no `forward` may
   * come between a prepare and its launch. Optional: an engine whose model lacks it encodes
   * each step when it issues it.
   */
  prepare?(batch: StepBatch): PreparedStep;
}

/** A step encoded by ForwardModel.prepare, not yet submitted. */
export interface PreparedStep {
  /** Makes the step's writes and submits it; the same as forward() would have returned. */
  launch(): StepOutput;
}
