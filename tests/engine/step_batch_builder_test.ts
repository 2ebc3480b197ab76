import { test } from "uvu";
import * as assert from "uvu/assert";
import { generationParams } from "../../src/engine/generation_params.ts";
import { Request } from "../../src/engine/request.ts";
import type { SchedulerOutput } from "../../src/engine/scheduler_output.ts";
import { buildStepBatch } from "../../src/engine/step_batch_builder.ts";
import { KvCacheManager } from "../../src/kv/kv_cache_manager.ts";

test("a step batch flattens decodes and prefill chunks, with slots from the block tables", () => {
  // blockSize 4. r0 decodes position 9; its input is row 2 of the previous step's output.
  // r1 prefills positions 4..6 after 4 computed tokens.
  //   r0 blocks [1 2 3]   r1 blocks [4 5]
  //   tokenIds      [ 0 | 44 45 46 ]     prevSampleRef [ 2 | -1 -1 -1 ]
  //   positions     [ 9 |  4  5  6 ]     slotMapping   [ 3*4+1 | 5*4+0 5*4+1 5*4+2 ]
  const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4, watermark: 0 });
  const params = generationParams({ temperature: 0.5, seed: 3 });
  const r0 = new Request("r0", Int32Array.from({ length: 9 }, (_, i) => 10 + i), params, 0);
  const r1 = new Request("r1", Int32Array.from({ length: 7 }, (_, i) => 40 + i), params, 1);
  kv.allocateSlots(r0, 10);
  kv.allocateSlots(r1, 7);
  const output: SchedulerOutput = {
    stepId: 1,
    scheduled: [
      {
        request: r0,
        numNewTokens: 1,
        numComputedBefore: 9,
        numKnownTokens: 9,
        prevSampleRow: 2,
        sampleRow: 0,
        isDecode: true,
      },
      {
        request: r1,
        numNewTokens: 3,
        numComputedBefore: 4,
        numKnownTokens: 7,
        prevSampleRow: -1,
        sampleRow: 1,
        isDecode: false,
      },
    ],
    numScheduledTokens: 4,
    numPreempted: 0,
    blockCopies: [[6, 7]],
    sampleRequests: [r0, r1],
  };
  const batch = buildStepBatch(output, kv);
  assert.equal(Array.from(batch.tokenIds), [0, 44, 45, 46]);
  assert.equal(Array.from(batch.prevSampleRef), [2, -1, -1, -1]);
  assert.equal(Array.from(batch.positions), [9, 4, 5, 6]);
  assert.equal(Array.from(batch.slotMapping), [13, 20, 21, 22]);
  assert.equal(
    batch.seqs.map((s) => [s.queryStart, s.queryLen, s.contextLen, Array.from(s.blockTable)]),
    [[0, 1, 10, [1, 2, 3]], [1, 3, 7, [4, 5]]],
  );
  assert.equal(Array.from(batch.sampleTokenIndices), [0, 3]);
  assert.equal(batch.sampling, [{ temperature: 0.5, seed: 3 }, { temperature: 0.5, seed: 3 }]);
  assert.equal(batch.blockCopies, [[6, 7]]);
});

test("a position past the known tokens without a sampled row to refer to is an error", () => {
  const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4, watermark: 0 });
  const r = new Request("r", Int32Array.of(1, 2), generationParams(), 0);
  kv.allocateSlots(r, 3);
  const output: SchedulerOutput = {
    stepId: 1,
    scheduled: [{
      request: r,
      numNewTokens: 1,
      numComputedBefore: 2,
      numKnownTokens: 2,
      prevSampleRow: -1,
      sampleRow: 0,
      isDecode: true,
    }],
    numScheduledTokens: 1,
    numPreempted: 0,
    blockCopies: [],
    sampleRequests: [r],
  };
  assert.throws(() => buildStepBatch(output, kv), /no input for position 2/);
});

test.run();
