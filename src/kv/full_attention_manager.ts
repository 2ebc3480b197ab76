import type { BlockHash } from "./block_hash.ts";
import type { BlockPool } from "./block_pool.ts";
import { BlockTable } from "./block_table.ts";
import type { KvCacheBlock } from "./kv_cache_block.ts";

/**
 * The KV manager of one full-attention group (vLLM's single-type KV cache manager):
 * request -> block table, and how many of a request's blocks are registered in the
 * prefix cache. The block pool owns the blocks; this owns only the mapping.
 *
 * ```
 * request r, blockSize 4, 10 tokens computed:
 * positions  0..3   4..7   8..11
 * table      [ 5,     2,     9 ]     numCachedBlocks(r) = 2 (blocks 5 and 2 are full)
 * ```
 */
export class FullAttentionManager {
  readonly #tables = new Map<string, BlockTable>();
  readonly #numCachedBlocks = new Map<string, number>();
  readonly #blockSize: number;

  /**
   * A manager for group `groupId` over the shared pool.
   * @param groupId index of the group
   * @param pool the shared block pool
   */
  constructor(readonly groupId: number, readonly pool: BlockPool) {
    this.#blockSize = pool.blockSize;
  }

  /** Number of requests holding blocks in this group. */
  get numRequests(): number {
    return this.#tables.size;
  }

  /** The request's block table, or undefined when it holds no blocks here. */
  table(requestId: string): BlockTable | undefined {
    return this.#tables.get(requestId);
  }

  /** How many of the request's leading blocks are registered in the prefix cache. */
  numCachedBlocks(requestId: string): number {
    return this.#numCachedBlocks.get(requestId) ?? 0;
  }

  /**
   * The longest run of cached blocks matching `hashes` from block 0, at most
   * `maxNumBlocks`, each re-checked against `tokens`.
   */
  findLongestCacheHit(
    hashes: readonly BlockHash[],
    tokens: ArrayLike<number>,
    maxNumBlocks: number,
  ): KvCacheBlock[] {
    const hits: KvCacheBlock[] = [];
    const n = Math.min(hashes.length, maxNumBlocks);
    for (let i = 0; i < n; i++) {
      const block = this.pool.getCachedBlock(
        this.groupId,
        hashes[i],
        tokens,
        i * this.#blockSize,
        i === 0 ? null : hashes[i - 1],
      );
      if (block === null) break;
      hits.push(block);
    }
    return hits;
  }

  /**
   * Blocks the pool must hand out so the request covers `numTokens` tokens after adding
   * `newComputedBlocks` (hits at refcount 0 count: touching takes them off the queue).
   */
  numBlocksToAllocate(
    requestId: string,
    numTokens: number,
    newComputedBlocks: readonly KvCacheBlock[],
  ): number {
    const held = (this.#tables.get(requestId)?.length ?? 0) + newComputedBlocks.length;
    const fresh = Math.max(0, Math.ceil(numTokens / this.#blockSize) - held);
    let evictable = 0;
    for (const block of newComputedBlocks) if (block.refCnt === 0) evictable++;
    return fresh + evictable;
  }

  /** Appends prefix-cache hits (already touched) to a request that holds no blocks yet. */
  saveNewComputedBlocks(requestId: string, blocks: readonly KvCacheBlock[]): void {
    if (blocks.length === 0) return;
    if (this.#tables.has(requestId)) {
      throw new Error(`request ${requestId} already holds blocks; hits come first`);
    }
    this.adopt(requestId, blocks, blocks.length);
  }

  /** Takes new blocks so the request covers `numTokens` tokens; returns them. */
  allocateNewBlocks(requestId: string, numTokens: number): KvCacheBlock[] {
    const table = this.#tables.get(requestId);
    const n = Math.ceil(numTokens / this.#blockSize) - (table?.length ?? 0);
    if (n <= 0) return [];
    const blocks = this.pool.getNewBlocks(n);
    if (table) table.push(blocks);
    else this.adopt(requestId, blocks, 0);
    return blocks;
  }

  /**
   * Makes `blocks` (references already taken) the request's table, the first
   * `numCachedBlocks` of them counted as already registered.
   */
  adopt(requestId: string, blocks: readonly KvCacheBlock[], numCachedBlocks: number): void {
    if (this.#tables.has(requestId)) throw new Error(`request ${requestId} already holds blocks`);
    const table = new BlockTable();
    table.push(blocks);
    this.#tables.set(requestId, table);
    this.#numCachedBlocks.set(requestId, numCachedBlocks);
  }

  /**
   * Registers the request's full blocks among its first `numTokens` tokens in the
   * prefix cache (those not registered yet, and only as far as `hashes` reach).
   */
  cacheBlocks(
    requestId: string,
    hashes: readonly BlockHash[],
    tokens: ArrayLike<number>,
    numTokens: number,
  ): void {
    const table = this.#tables.get(requestId);
    if (!table) return;
    const from = this.#numCachedBlocks.get(requestId) ?? 0;
    const to = Math.min(Math.floor(numTokens / this.#blockSize), hashes.length, table.length);
    for (let i = from; i < to; i++) {
      this.pool.cacheFullBlock(
        this.groupId,
        table.at(i),
        hashes[i],
        i === 0 ? null : hashes[i - 1],
        tokens,
        i * this.#blockSize,
      );
    }
    if (to > from) this.#numCachedBlocks.set(requestId, to);
  }

  /** Forgets the request and returns its blocks tail first (the order to free them in). */
  remove(requestId: string): KvCacheBlock[] {
    const table = this.#tables.get(requestId);
    this.#tables.delete(requestId);
    this.#numCachedBlocks.delete(requestId);
    return table ? [...table.blocks].reverse() : [];
  }
}
