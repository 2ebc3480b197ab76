import type { BlockHash } from "./block_hash.ts";

/**
 * One physical KV block: `block_size` consecutive KV slots in every layer's KV store,
 * identified by `blockId` (slot = blockId * blockSize + offset).
 *
 * The block pool owns every field: `refCnt` counts the requests (and pending copies or
 * deferred frees) that hold the block; a block with `refCnt == 0` sits in the free
 * queue, threaded through `prevFree` / `nextFree` so that touching it removes it in
 * O(1). `blockHash` is set while the block is registered in the prefix cache (only
 * full blocks are); a cached block stays reusable at refcount 0 until it is evicted.
 *
 * ```ts
 * const block = new KvCacheBlock(7);
 * block.refCnt; // 0
 * ```
 */
export class KvCacheBlock {
  /** Number of holders; never negative. 0 means the block is in the free queue. */
  refCnt = 0;
  /** Hash of the full block while it is registered in the prefix cache, else null. */
  blockHash: BlockHash | null = null;
  /** Hash of the previous block of the chain it was cached under (null for block 0). */
  parentHash: BlockHash | null = null;
  /** KV group whose prefix cache holds the block while `blockHash` is set, else -1. */
  groupId: number = -1;
  /** Free-queue neighbours; both null while the block is not in the free queue. */
  prevFree: KvCacheBlock | null = null;
  /** Free-queue neighbours; both null while the block is not in the free queue. */
  nextFree: KvCacheBlock | null = null;

  /**
   * A free, uncached block.
   * @param blockId physical id (index into the KV store), or -1 for a queue sentinel
   * @param isNull true for the null block (block 0), which is never allocated or freed
   */
  constructor(readonly blockId: number, readonly isNull = false) {}
}
