/**
 * TEST DOUBLE (tests only, never shipped in src/): a deterministic CPU stand-in for the
 * ForwardModel. It keeps a fake KV store holding one token id per KV slot. `forward`
 * checks the batch's shape, runs the block copies, writes every input token into its
 * slot (a `prevSampleRef` input is taken from its own previous output, the way the GPU
 * keeps sampled tokens on the device), then for each sampled sequence reads the
 * sequence's tokens back through its block table and returns `nextToken(those tokens)`.
 * Any wrong block table, slot, prefix hit, block copy or placeholder changes the output.
 */
import { setImmediate } from "node:timers";
import type {
  ForwardModel,
  PreparedStep,
  SamplingParams,
  StepBatch,
  StepOutput,
} from "../../src/model/step_batch.ts";

/** The "model": FNV-1a over the context tokens (plus seed and position when sampling). */
export function nextToken(
  context: ArrayLike<number>,
  sampling: SamplingParams,
  vocabSize: number,
): number {
  let h = 0x811c9dc5;
  const mix = (v: number) => {
    h = Math.imul(h ^ (v & 0xffff), 16777619);
    h = Math.imul(h ^ (v >>> 16), 16777619);
  };
  for (let i = 0; i < context.length; i++) mix(context[i]);
  if (sampling.temperature > 0) {
    mix(sampling.seed);
    mix(context.length);
  }
  return (h >>> 0) % vocabSize;
}

/** Shape of the double. */
export interface CpuTestModelOptions {
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly vocabSize?: number;
  readonly maxModelLen?: number;
  readonly eosTokenIds?: readonly number[];
  /** Throw when a sequence reads a KV slot no step wrote (default true). */
  readonly strictKv?: boolean;
}

/** One-request-at-a-time greedy/seeded generation straight from `nextToken`. */
export function referenceGenerate(
  prompt: readonly number[],
  params: { maxTokens: number; ignoreEos?: boolean; temperature?: number; seed?: number },
  model: { vocabSize: number; eosTokenIds: readonly number[]; maxModelLen: number },
): number[] {
  const tokens = [...prompt];
  const out: number[] = [];
  const sampling = { temperature: params.temperature ?? 0, seed: params.seed ?? 0 };
  while (out.length < params.maxTokens && tokens.length < model.maxModelLen) {
    const t = nextToken(tokens, sampling, model.vocabSize);
    tokens.push(t);
    out.push(t);
    if (!params.ignoreEos && model.eosTokenIds.includes(t)) break;
  }
  return out;
}

export class CpuTestModel implements ForwardModel {
  readonly blockSize: number;
  readonly numBlocks: number;
  readonly vocabSize: number;
  readonly maxModelLen: number;
  readonly eosTokenIds: readonly number[];
  /** [numBlocks * blockSize] token id written to each KV slot, -1 = never written. */
  readonly kvTokens: Int32Array;
  /** Every batch seen, in order. */
  readonly batches: StepBatch[] = [];
  /** Most steps issued and not yet resolved at any one time. */
  maxInFlight = 0;
  #inFlight = 0;
  #prevSampled: Int32Array | null = null;
  readonly #strict: boolean;

  constructor(o: CpuTestModelOptions) {
    this.blockSize = o.blockSize;
    this.numBlocks = o.numBlocks;
    this.vocabSize = o.vocabSize ?? 50;
    this.maxModelLen = o.maxModelLen ?? 256;
    this.eosTokenIds = o.eosTokenIds ?? [0];
    this.kvTokens = new Int32Array(o.numBlocks * o.blockSize).fill(-1);
    this.#strict = o.strictKv ?? true;
  }

  /** prepare() and launch() calls in order ("prepare 0", "launch 0": batch indices). */
  readonly preparedLog: string[] = [];
  #prepared = 0;
  #launched = 0;

  /**
   * ForwardModel.prepare: logs it; the step computes at launch (this model's KV writes are
   * immediate, as a GPU step's are in submit order), and launches must come in order.
   */
  prepare(batch: StepBatch): PreparedStep {
    const ticket = this.#prepared++;
    this.preparedLog.push(`prepare ${ticket}`);
    return {
      launch: () => {
        if (ticket !== this.#launched++) throw new Error(`step ${ticket} launched out of order`);
        this.preparedLog.push(`launch ${ticket}`);
        return this.forward(batch);
      },
    };
  }

  forward(batch: StepBatch): StepOutput {
    this.batches.push(batch);
    const bs = this.blockSize;
    const n = batch.tokenIds.length;
    for (const arr of [batch.prevSampleRef, batch.positions, batch.slotMapping]) {
      if (arr.length !== n) throw new Error("per-token arrays differ in length");
    }
    for (const [src, dst] of batch.blockCopies) {
      this.kvTokens.copyWithin(dst * bs, src * bs, (src + 1) * bs);
    }
    let expectStart = 0;
    for (const seq of batch.seqs) {
      if (seq.queryStart !== expectStart || seq.queryLen < 1) {
        throw new Error("seqs not contiguous");
      }
      expectStart += seq.queryLen;
      if (seq.blockTable.length !== Math.ceil(seq.contextLen / bs)) {
        throw new Error(`block table of ${seq.blockTable.length} for context ${seq.contextLen}`);
      }
      for (let k = 0; k < seq.queryLen; k++) {
        const i = seq.queryStart + k;
        const pos = batch.positions[i];
        if (pos !== seq.contextLen - seq.queryLen + k) {
          throw new Error(`position ${pos} out of order`);
        }
        const block = seq.blockTable[Math.floor(pos / bs)];
        if (block <= 0 || block >= this.numBlocks) throw new Error(`block id ${block} invalid`);
        if (batch.slotMapping[i] !== block * bs + (pos % bs)) throw new Error(`slot of token ${i}`);
        const ref = batch.prevSampleRef[i];
        let token = batch.tokenIds[i];
        if (ref >= 0) {
          if (!this.#prevSampled || ref >= this.#prevSampled.length) {
            throw new Error(`prevSampleRef ${ref} has no previous sampled token`);
          }
          token = this.#prevSampled[ref];
        }
        this.kvTokens[batch.slotMapping[i]] = token;
      }
    }
    if (expectStart !== n) throw new Error("seqs do not cover the tokens");
    const sampled = new Int32Array(batch.sampleTokenIndices.length);
    batch.sampleTokenIndices.forEach((tokenIndex, row) => {
      const seq = batch.seqs.find((s) => s.queryStart + s.queryLen - 1 === tokenIndex);
      if (!seq) throw new Error(`sampled token ${tokenIndex} is not the last of a sequence`);
      const context = new Int32Array(seq.contextLen);
      for (let p = 0; p < seq.contextLen; p++) {
        context[p] = this.kvTokens[seq.blockTable[Math.floor(p / bs)] * bs + (p % bs)];
        if (context[p] < 0 && this.#strict) throw new Error(`position ${p} reads unwritten KV`);
      }
      sampled[row] = nextToken(context, batch.sampling[row], this.vocabSize);
    });
    this.#prevSampled = sampled;
    this.#inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.#inFlight);
    // The tokens "arrive" a macrotask later, as from a GPU read-back.
    const done = new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      this.#inFlight--;
    });
    return {
      sampled: done.then(() => sampled),
      gpuMs: done.then(() => n / 1000),
    };
  }
}
