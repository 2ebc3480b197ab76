/**
 * Turns a scheduler output into the StepBatch the model consumes: flattened token ids
 * (a decode input still in flight becomes a `prevSampleRef` into the previous step's
 * sampled output, so the step starts without a read-back), positions, slot mapping,
 * per-sequence block tables, sampled rows, the copy-on-write block copies and the
 * blocks to zero-fill.
 *
 * ```
 * blockSize 4; r0 decodes position 9 (its input sampled by the previous step, row 2);
 * r1 prefills positions 4..6:
 * tokenIds       [ 0 | u4 u5 u6 ]     prevSampleRef [ 2 | -1 -1 -1 ]
 * positions      [ 9 |  4  5  6 ]     slotMapping[i] = table[pos >> 2] * 4 + (pos & 3)
 * ```
 */
import type { KvCacheManager } from "../kv/kv_cache_manager.ts";
import type { SamplingParams, StepBatch, StepSequence } from "../model/step_batch.ts";
import type { SchedulerOutput } from "./scheduler_output.ts";

/** Builds the StepBatch of `output` from the requests' block tables in `kv`. */
export function buildStepBatch(output: SchedulerOutput, kv: KvCacheManager): StepBatch {
  const bs = kv.blockSize;
  const shift = Math.log2(bs);
  const n = output.numScheduledTokens;
  const tokenIds = new Int32Array(n);
  const prevSampleRef = new Int32Array(n).fill(-1);
  const positions = new Int32Array(n);
  const slotMapping = new Int32Array(n);
  const numSamples = output.sampleRequests.length;
  const sampleTokenIndices = new Int32Array(numSamples);
  const sampling = new Array<SamplingParams>(numSamples);
  const seqs: StepSequence[] = [];
  let q = 0;
  for (const s of output.scheduled) {
    const request = s.request;
    const from = s.numComputedBefore;
    const contextLen = from + s.numNewTokens;
    const blockTable = kv.blockTable(request.requestId, contextLen);
    for (let k = 0; k < s.numNewTokens; k++) {
      const pos = from + k, i = q + k;
      positions[i] = pos;
      if (pos < s.numKnownTokens) tokenIds[i] = request.tokenIds[pos];
      else if (pos === s.numKnownTokens && s.prevSampleRow >= 0) prevSampleRef[i] = s.prevSampleRow;
      else throw new Error(`request ${request.requestId}: no input for position ${pos}`);
      slotMapping[i] = blockTable[pos >> shift] * bs + (pos & (bs - 1));
    }
    seqs.push({ queryStart: q, queryLen: s.numNewTokens, contextLen, blockTable });
    if (s.sampleRow >= 0) {
      sampleTokenIndices[s.sampleRow] = q + s.numNewTokens - 1;
      sampling[s.sampleRow] = request.sampling;
    }
    q += s.numNewTokens;
  }
  return {
    tokenIds,
    prevSampleRef,
    positions,
    seqs,
    slotMapping,
    sampleTokenIndices,
    sampling,
    blockCopies: output.blockCopies,
    blockZeros: output.blockZeros ?? [],
  };
}
