/**
 * The block pool: `numBlocks` physical KV blocks of `blockSize` tokens, their
 * refcounts, the free queue in eviction order and the prefix cache (block hash -> block,
 * one table per KV group). It owns all of that state; managers only ask.
 *
 * Block 0 is the null block: taken at construction, never handed out or freed (a block
 * table may point at it for a slot that holds nothing). The other `numBlocks - 1`
 * blocks are usable. A full block whose hash is registered stays reusable at refcount
 * 0 until `getNewBlocks` takes it from the front of the free queue and evicts it.
 *
 * Layout after `new BlockPool(5, 4, true)` and `getNewBlocks(2)`:
 * ```
 * block      0     1  2  3  4
 * refCnt     null  1  1  0  0
 * free queue             3  4      (front -> back)
 * ```
 */
import type { BlockHash } from "./block_hash.ts";
import { FreeBlockQueue } from "./free_block_queue.ts";
import { KvCacheBlock } from "./kv_cache_block.ts";

/** Pool accounting, in blocks. `total == free + inUse`; `cachedFree <= free`. */
export interface KvPoolUsage {
  /** Usable blocks (every block but the null block). */
  readonly total: number;
  /** Blocks at refcount 0 (in the free queue), cached or not. */
  readonly free: number;
  /** Blocks held by at least one reference. */
  readonly inUse: number;
  /** Blocks registered in the prefix cache, at any refcount. */
  readonly cached: number;
  /** Cached blocks at refcount 0: reusable on a hit until evicted. */
  readonly cachedFree: number;
}

/** The pool of physical KV blocks (see the module doc above). */
export class BlockPool {
  /** Every block, indexed by block id; `blocks[0]` is the null block. */
  readonly blocks: readonly KvCacheBlock[];
  /** The null block (block 0). */
  readonly nullBlock: KvCacheBlock;
  readonly #queue: FreeBlockQueue;
  readonly #cache: Map<BlockHash, KvCacheBlock>[] = [];
  /** Token ids of each cached block, [numBlocks * blockSize], for the hit re-check. */
  readonly #tokens: Int32Array;
  #numCached = 0;
  #numCachedFree = 0;

  /**
   * Builds the blocks, takes block 0 as the null block and queues the rest in id order.
   * @param numBlocks physical blocks including the null block (>= 2)
   * @param blockSize tokens per block, a power of two
   * @param enablePrefixCaching when false, full blocks are never registered
   */
  constructor(
    readonly numBlocks: number,
    readonly blockSize: number,
    readonly enablePrefixCaching: boolean,
  ) {
    if (!Number.isInteger(numBlocks) || numBlocks < 2) {
      throw new Error(`numBlocks must be an integer >= 2 (the null block + 1), got ${numBlocks}`);
    }
    if (!Number.isInteger(blockSize) || blockSize < 1 || (blockSize & (blockSize - 1)) !== 0) {
      throw new Error(`blockSize must be a power of two, got ${blockSize}`);
    }
    const blocks: KvCacheBlock[] = [new KvCacheBlock(0, true)];
    for (let i = 1; i < numBlocks; i++) blocks.push(new KvCacheBlock(i));
    this.blocks = blocks;
    this.nullBlock = blocks[0];
    this.#queue = new FreeBlockQueue(blocks.slice(1));
    this.#tokens = new Int32Array(numBlocks * blockSize);
  }

  /** Number of usable blocks (all but the null block). */
  get numUsableBlocks(): number {
    return this.numBlocks - 1;
  }

  /** Blocks at refcount 0, cached or not: what `getNewBlocks` can hand out. */
  get numFreeBlocks(): number {
    return this.#queue.length;
  }

  /** Accounting snapshot. */
  usage(): KvPoolUsage {
    const free = this.#queue.length;
    return {
      total: this.numUsableBlocks,
      free,
      inUse: this.numUsableBlocks - free,
      cached: this.#numCached,
      cachedFree: this.#numCachedFree,
    };
  }

  /**
   * Takes `n` blocks from the front of the free queue at refcount 1, evicting the
   * prefix-cache entries of those that were cached. Throws when fewer are free (callers
   * check first: allocation is all or nothing).
   */
  getNewBlocks(n: number): KvCacheBlock[] {
    if (n > this.#queue.length) {
      throw new Error(`cannot get ${n} free blocks: only ${this.#queue.length} are free`);
    }
    const out = this.#queue.popLeftN(n);
    for (const block of out) {
      if (block.blockHash !== null) {
        this.#numCachedFree--;
        this.#evict(block);
      }
      block.refCnt = 1;
    }
    return out;
  }

  /**
   * The block cached in `groupId` under `hash`, if its tokens equal
   * `tokens[start, start + blockSize)` and it chains `parentHash`; else null.
   */
  getCachedBlock(
    groupId: number,
    hash: BlockHash,
    tokens: ArrayLike<number>,
    start: number,
    parentHash: BlockHash | null,
  ): KvCacheBlock | null {
    const block = this.#cache[groupId]?.get(hash);
    if (block === undefined || block.parentHash !== parentHash) return null;
    const base = block.blockId * this.blockSize;
    for (let i = 0; i < this.blockSize; i++) {
      if (this.#tokens[base + i] !== tokens[start + i]) return null;
    }
    return block;
  }

  /**
   * Registers a full `block` (held by a request) in `groupId`'s prefix cache under
   * `hash`, recording `tokens[start, start + blockSize)` for the hit re-check. Returns
   * false (and registers nothing) when caching is off or the hash is already cached by
   * another block.
   */
  cacheFullBlock(
    groupId: number,
    block: KvCacheBlock,
    hash: BlockHash,
    parentHash: BlockHash | null,
    tokens: ArrayLike<number>,
    start: number,
  ): boolean {
    if (!this.enablePrefixCaching) return false;
    if (block.isNull || block.refCnt === 0) {
      throw new Error(`block ${block.blockId} must be held to be cached`);
    }
    if (block.blockHash !== null) {
      if (block.blockHash === hash && block.groupId === groupId) return true;
      throw new Error(`block ${block.blockId} is already cached under another hash`);
    }
    const table = this.#cache[groupId] ??= new Map();
    if (table.has(hash)) return false;
    table.set(hash, block);
    block.blockHash = hash;
    block.parentHash = parentHash;
    block.groupId = groupId;
    const base = block.blockId * this.blockSize;
    for (let i = 0; i < this.blockSize; i++) this.#tokens[base + i] = tokens[start + i];
    this.#numCached++;
    return true;
  }

  /** Adds one reference to each block, taking those at refcount 0 off the free queue. */
  touch(blocks: readonly KvCacheBlock[]): void {
    for (const block of blocks) {
      if (block.isNull) throw new Error("the null block cannot be referenced");
      if (block.refCnt === 0) {
        this.#queue.remove(block);
        if (block.blockHash !== null) this.#numCachedFree--;
      }
      block.refCnt++;
    }
  }

  /**
   * Drops one reference from each block; blocks reaching 0 join the back of the free
   * queue in the given order (so pass a request's blocks tail first: its tail is then
   * evicted before its prefix).
   */
  freeBlocks(orderedBlocks: readonly KvCacheBlock[]): void {
    for (const block of orderedBlocks) {
      if (block.isNull) throw new Error("the null block cannot be freed");
      if (block.refCnt <= 0) throw new Error(`block ${block.blockId} freed at refcount 0`);
      block.refCnt--;
      if (block.refCnt === 0) {
        this.#queue.append(block);
        if (block.blockHash !== null) this.#numCachedFree++;
      }
    }
  }

  /**
   * Forgets every prefix-cache entry. Refused (returns false) while any block is held,
   * since a held block may still be hit by its owner's next lookup.
   */
  resetPrefixCache(): boolean {
    if (this.#queue.length !== this.numUsableBlocks) return false;
    for (const table of this.#cache) {
      for (const block of table?.values() ?? []) {
        block.blockHash = null;
        block.parentHash = null;
        block.groupId = -1;
      }
      table?.clear();
    }
    this.#numCached = 0;
    this.#numCachedFree = 0;
    return true;
  }

  /** Ids of the free blocks in eviction order (front first). */
  freeBlockIds(): number[] {
    return [...this.#queue].map((b) => b.blockId);
  }

  /** Every prefix-cache entry as [groupId, hash, block]. */
  *cachedEntries(): IterableIterator<[number, BlockHash, KvCacheBlock]> {
    for (let g = 0; g < this.#cache.length; g++) {
      for (const [hash, block] of this.#cache[g] ?? []) yield [g, hash, block];
    }
  }

  /** The token ids recorded for cached block `blockId` (a copy). */
  cachedTokens(blockId: number): Int32Array {
    const base = blockId * this.blockSize;
    return this.#tokens.slice(base, base + this.blockSize);
  }

  #evict(block: KvCacheBlock): void {
    this.#cache[block.groupId].delete(block.blockHash!);
    block.blockHash = null;
    block.parentHash = null;
    block.groupId = -1;
    this.#numCached--;
  }
}
