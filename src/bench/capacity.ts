/**
 * The envelope points are planned against, read off the engine once: pool size and
 * watermark, block size, and the per-step and per-request limits.
 *
 * ```ts
 * const capacity = benchCapacity(engine);
 * capacity.usable_blocks; // blocks a point may take (pool minus watermark)
 * ```
 */
import type { Engine } from "../engine/engine.ts";
import type { BenchCapacity } from "./artifact.ts";

/** The engine's capacity as the benchmark plans with it. */
export function benchCapacity(engine: Engine): BenchCapacity {
  const total = engine.kv.pool.numUsableBlocks;
  const watermark = engine.kv.watermarkBlocks;
  return Object.freeze({
    block_size: engine.kv.blockSize,
    blocks_total: total,
    watermark_blocks: watermark,
    usable_blocks: total - watermark,
    max_model_len: engine.config.maxModelLen,
    max_num_seqs: engine.config.maxNumSeqs,
    max_batched_tokens: engine.config.maxNumBatchedTokens,
    prefix_caching: engine.config.enablePrefixCaching,
  });
}

/** KV blocks that hold `tokens` tokens. */
export function blocksFor(tokens: number, blockSize: number): number {
  return Math.ceil(tokens / blockSize);
}
