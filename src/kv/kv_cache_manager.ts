/**
 * The KV cache manager: the one KV interface the scheduler (and, through the engine,
 * the benchmark) uses. It owns request -> blocks (through the coordinator and its
 * per-group managers), the deferred-free fence, and the copy-on-write copies waiting to
 * ride the next step; the block pool owns the blocks.
 *
 * Invariants kept here:
 * - allocation is all or nothing, over every group;
 * - a prefix hit never covers the whole known sequence (one token is always computed)
 *   and re-checks the tokens of every block;
 * - only full blocks are hashed and cached, each hash chaining its parent;
 * - a request's blocks are freed tail first, after the last issued step that reads
 *   them has completed;
 * - a write never lands in a block another holder shares: the only way to write into a
 *   shared tail is to fork it first (`forkTail`), whose GPU copy rides the next step.
 *
 * ```ts
 * const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
 * const hit = kv.getComputedBlocks(req);            // longest cached prefix
 * const blocks = kv.allocateSlots(req, 6, 0, hit);  // null when the pool is short
 * const { stepId, blockCopies } = kv.beginStep([req.requestId]);
 * // ... the step runs ...
 * kv.completeStep(stepId);
 * kv.free(req.requestId);
 * ```
 */
import { extendBlockHashes } from "./block_hash.ts";
import { BlockPool, type KvPoolUsage } from "./block_pool.ts";
import { DeferredFreeFence } from "./deferred_free_fence.ts";
import type { KvCacheBlock } from "./kv_cache_block.ts";
import { KvCacheCoordinator } from "./kv_cache_coordinator.ts";
import { FULL_ATTENTION_GROUP, type KvCacheGroupSpec } from "./kv_cache_group.ts";
import type { KvRequest } from "./kv_request.ts";

/** How the KV cache is laid out. Validated once by the manager's constructor. */
export interface KvCacheConfig {
  /** Physical blocks including the null block. */
  readonly numBlocks: number;
  /** Tokens per block, a power of two (default 16). */
  readonly blockSize?: number;
  /** Register full blocks and look up cached prefixes (default true). */
  readonly enablePrefixCaching?: boolean;
  /** Fraction of usable blocks a newly admitted request must leave free (default 0.01). */
  readonly watermark?: number;
  /** KV groups (default: one full-attention group). */
  readonly groups?: readonly KvCacheGroupSpec[];
}

/** A prefix-cache hit: per group the hit blocks, and the tokens they cover. */
export interface CacheHit {
  /** Per group, the hit blocks from block 0 on. */
  readonly blocks: readonly (readonly KvCacheBlock[])[];
  /** Tokens the hit covers (whole blocks). */
  readonly numComputedTokens: number;
}

/** A KV block copy [src, dst] that a step performs before its attention. */
export type BlockCopy = readonly [src: number, dst: number];

/** Pool accounting plus what the manager holds. */
export interface KvCacheUsage extends KvPoolUsage {
  /** Blocks whose free waits for an in-flight step (still counted in `inUse`). */
  readonly pendingFree: number;
  /** Copy-on-write copies registered but not yet issued (each holds its src block). */
  readonly pendingCopies: number;
  /** Blocks a newly admitted request must leave free. */
  readonly watermarkBlocks: number;
  /** Requests holding blocks. */
  readonly numRequests: number;
}

/** The empty hit. */
export const NO_CACHE_HIT: CacheHit = Object.freeze({
  blocks: Object.freeze([]) as readonly (readonly KvCacheBlock[])[],
  numComputedTokens: 0,
});

interface PendingCopy {
  readonly src: KvCacheBlock;
  readonly dst: KvCacheBlock;
}

interface RequestRecord {
  /** Last issued step that reads or writes the request's blocks (0 for none). */
  lastReadStep: number;
  /** False for shadows: their blocks are never registered in the prefix cache. */
  readonly cacheable: boolean;
  /** Copies not yet issued; each holds a reference on its src until its step completes. */
  copies: PendingCopy[];
  /** The request's own blocks to zero-fill before the next step reads them (shadow tails). */
  zeros: KvCacheBlock[];
}

/** The KV cache manager (see the module doc above). */
export class KvCacheManager {
  /** The shared block pool. */
  readonly pool: BlockPool;
  /** Tokens per block. */
  readonly blockSize: number;
  /** Blocks a newly admitted request must leave free. */
  readonly watermarkBlocks: number;
  readonly #coordinator: KvCacheCoordinator;
  readonly #fence = new DeferredFreeFence<KvCacheBlock>();
  readonly #records = new Map<string, RequestRecord>();
  readonly #withCopies = new Set<string>();
  #numPendingCopies = 0;

  /** Validates `config` and builds the pool and one manager per group. */
  constructor(config: KvCacheConfig) {
    const blockSize = config.blockSize ?? 16;
    const watermark = config.watermark ?? 0.01;
    if (!(watermark >= 0 && watermark < 1)) {
      throw new Error(`watermark must be a fraction in [0, 1), got ${watermark}`);
    }
    this.pool = new BlockPool(config.numBlocks, blockSize, config.enablePrefixCaching ?? true);
    this.blockSize = blockSize;
    this.watermarkBlocks = Math.floor(watermark * this.pool.numUsableBlocks);
    this.#coordinator = new KvCacheCoordinator(this.pool, config.groups ?? [FULL_ATTENTION_GROUP]);
  }

  /** Number of KV groups. */
  get numGroups(): number {
    return this.#coordinator.numGroups;
  }

  /** True when prefix caching is on. */
  get enablePrefixCaching(): boolean {
    return this.pool.enablePrefixCaching;
  }

  /** Id of the last step issued by `beginStep` (0 before the first). */
  get lastIssuedStep(): number {
    return this.#fence.lastIssuedStep;
  }

  /** Every step up to this id has completed. */
  get lastCompletedStep(): number {
    return this.#fence.lastCompletedStep;
  }

  /** True when the request holds blocks. */
  holds(requestId: string): boolean {
    return this.#records.has(requestId);
  }

  /** Accounting snapshot. */
  usage(): KvCacheUsage {
    return {
      ...this.pool.usage(),
      pendingFree: this.#fence.numPending,
      pendingCopies: this.#numPendingCopies,
      watermarkBlocks: this.watermarkBlocks,
      numRequests: this.#records.size,
    };
  }

  /** Ids of the request's blocks, per group (empty arrays when it holds none). */
  blockIds(requestId: string): number[][] {
    return this.#coordinator.managers.map((m) => Array.from(m.table(requestId)?.ids() ?? []));
  }

  /** The group's block table of the request covering `numTokens` tokens (a copy). */
  blockTable(requestId: string, numTokens: number, groupId = 0): Int32Array {
    const table = this.#coordinator.managers[groupId]?.table(requestId);
    if (!table) throw new Error(`request ${requestId} holds no blocks in group ${groupId}`);
    return table.ids(Math.ceil(numTokens / this.blockSize));
  }

  /**
   * The longest cached prefix of the request's known tokens, in whole blocks, never
   * the whole sequence: at least one token is left to compute.
   */
  getComputedBlocks(request: KvRequest): CacheHit {
    if (
      !this.pool.enablePrefixCaching || this.#records.get(request.requestId)?.cacheable === false
    ) {
      return NO_CACHE_HIT;
    }
    extendBlockHashes(request.blockHashes, request.tokenIds, this.blockSize, request.cacheSalt);
    const maxNumBlocks = Math.floor((request.tokenIds.length - 1) / this.blockSize);
    const blocks = this.#coordinator.findLongestCacheHit(
      request.blockHashes,
      request.tokenIds,
      maxNumBlocks,
    );
    const n = blocks[0].length;
    return n === 0 ? NO_CACHE_HIT : { blocks, numComputedTokens: n * this.blockSize };
  }

  /**
   * Gives the request slots for `numNewTokens` more tokens (plus `numLookaheadTokens`)
   * after its computed tokens and the prefix `hit` (only on admission, when it holds no
   * blocks). Returns the new blocks per group, or null (taking nothing) when the pool
   * cannot supply them; a request holding no blocks must also leave the watermark free.
   * Full blocks whose tokens are known are registered in the prefix cache now.
   */
  allocateSlots(
    request: KvRequest,
    numNewTokens: number,
    numLookaheadTokens = 0,
    hit: CacheHit = NO_CACHE_HIT,
  ): KvCacheBlock[][] | null {
    if (!Number.isInteger(numNewTokens) || numNewTokens < 1) {
      throw new Error(`numNewTokens must be a positive integer, got ${numNewTokens}`);
    }
    const id = request.requestId;
    const isNew = !this.#records.has(id);
    if (!isNew && hit.numComputedTokens > 0) {
      throw new Error(`request ${id} already holds blocks; a prefix hit applies on admission only`);
    }
    const numComputed = request.numComputedTokens + hit.numComputedTokens;
    const numTokens = numComputed + numNewTokens + numLookaheadTokens;
    const need = this.#coordinator.numBlocksToAllocate(id, numTokens, hit.blocks);
    const spare = this.pool.numFreeBlocks - (isNew ? this.watermarkBlocks : 0);
    if (need > spare) return null;
    if (!isNew) this.#assertPrivateWrites(id, numComputed, numComputed + numNewTokens);

    if (hit.numComputedTokens > 0) {
      for (const blocks of hit.blocks) this.pool.touch(blocks);
      this.#coordinator.saveNewComputedBlocks(id, hit.blocks);
    }
    const fresh = this.#coordinator.allocateNewBlocks(id, numTokens);
    if (isNew) this.#records.set(id, { lastReadStep: 0, cacheable: true, copies: [], zeros: [] });
    this.cacheBlocks(request, Math.min(numComputed + numNewTokens, request.tokenIds.length));
    return fresh;
  }

  /**
   * Registers the request's full blocks among its first `numTokens` tokens (only known
   * tokens can be hashed; later calls catch up as tokens arrive).
   */
  cacheBlocks(request: KvRequest, numTokens: number): void {
    const record = this.#records.get(request.requestId);
    if (!this.pool.enablePrefixCaching || !record?.cacheable) return;
    const n = Math.min(numTokens, request.tokenIds.length);
    if (request.blockHashes.length * this.blockSize < n - this.blockSize + 1) {
      extendBlockHashes(request.blockHashes, request.tokenIds, this.blockSize, request.cacheSalt);
    }
    this.#coordinator.cacheBlocks(request.requestId, request.blockHashes, request.tokenIds, n);
  }

  /**
   * Releases every block of the request, tail first. Blocks that an in-flight step reads
   * are freed when that step completes (the deferred-free fence); copies not yet issued
   * are dropped.
   */
  free(requestId: string): void {
    const record = this.#records.get(requestId);
    if (!record) return;
    this.#records.delete(requestId);
    this.#withCopies.delete(requestId);
    for (const copy of record.copies) this.pool.freeBlocks([copy.src]);
    this.#numPendingCopies -= record.copies.length;
    const blocks = this.#coordinator.remove(requestId);
    this.pool.freeBlocks(this.#fence.defer(record.lastReadStep, blocks));
  }

  /**
   * Copy-on-write fork of the request's shared tail: in every group where the block
   * that its next token writes into has other holders, a new private block replaces it;
   * when that block already holds computed tokens of the request, the GPU copy
   * [src, dst] rides the next step (the request's reference on src is kept until that
   * step completes). Returns the copies, or null (changing nothing) when the pool
   * cannot supply the new blocks.
   */
  forkTail(request: KvRequest): BlockCopy[] | null {
    const id = request.requestId;
    const record = this.#records.get(id);
    if (!record) throw new Error(`request ${id} holds no blocks to fork`);
    const index = Math.floor(request.numComputedTokens / this.blockSize);
    const shared = this.#coordinator.managers.filter((m) => {
      const table = m.table(id);
      return table !== undefined && index < table.length && table.at(index).refCnt > 1;
    });
    if (shared.length > this.pool.numFreeBlocks) return null;
    const copies: BlockCopy[] = [];
    const holdsComputed = request.numComputedTokens % this.blockSize !== 0;
    for (const m of shared) {
      const [dst] = this.pool.getNewBlocks(1);
      const src = m.table(id)!.replace(index, dst);
      if (holdsComputed) {
        record.copies.push({ src, dst });
        this.#numPendingCopies++;
        this.#withCopies.add(id);
        copies.push([src.blockId, dst.blockId]);
      } else {
        this.pool.freeBlocks(this.#fence.defer(record.lastReadStep, [src]));
      }
    }
    return copies;
  }

  /**
   * Fake-KV injection (untimed): gives a request that holds nothing blocks for
   * `numComputedTokens + 1` tokens, treating the first `numComputedTokens` as computed,
   * and registers their full blocks in the prefix cache now. The KV content is whatever
   * the blocks hold. Returns false (taking nothing) when the pool is short.
   */
  injectComputed(request: KvRequest, numComputedTokens: number): boolean {
    const id = request.requestId;
    if (this.#records.has(id)) throw new Error(`request ${id} already holds blocks`);
    if (!Number.isInteger(numComputedTokens) || numComputedTokens < 0) {
      throw new Error(`numComputedTokens must be a non-negative integer, got ${numComputedTokens}`);
    }
    if (request.tokenIds.length < numComputedTokens + 1) {
      throw new Error(
        `request ${id}: injecting ${numComputedTokens} computed tokens needs at least ` +
          `${numComputedTokens + 1} known tokens, it has ${request.tokenIds.length}`,
      );
    }
    const need = this.#coordinator.numBlocksToAllocate(id, numComputedTokens + 1, []);
    if (need > this.pool.numFreeBlocks - this.watermarkBlocks) return false;
    this.#coordinator.allocateNewBlocks(id, numComputedTokens + 1);
    this.#records.set(id, { lastReadStep: 0, cacheable: true, copies: [], zeros: [] });
    this.cacheBlocks(request, numComputedTokens);
    return true;
  }

  /**
   * Registers a shadow of a parked chain, all or nothing across groups: the shadow
   * shares the chain's full blocks below `numComputedTokens` by refcount and gets a
   * private tail up to `numTokensToHold` tokens. With `cow`, the chain's partial block
   * at `numComputedTokens` is copied into the first tail block by the next step (the
   * copy holds a reference on the chain's block until then); without it the tail is
   * fresh and the next step zero-fills its first block (the only tail block read before
   * the shadow writes it), so the positions below `numComputedTokens` in it read zero
   * K/V rather than whatever the block held. The pool is checked first
   * (the tail must fit above the watermark), then the tail is taken, then the shared
   * prefix touched. Shadow blocks are never registered in the prefix cache. Returns
   * false (taking nothing) when the pool is short.
   */
  registerShadow(
    shadow: KvRequest,
    chain: KvRequest,
    numComputedTokens: number,
    numTokensToHold: number,
    cow: boolean,
  ): boolean {
    const id = shadow.requestId;
    if (this.#records.has(id)) throw new Error(`shadow ${id} already holds blocks`);
    if (!Number.isInteger(numComputedTokens) || numComputedTokens < 1) {
      throw new Error(`shadow ${id}: numComputedTokens must be a positive integer`);
    }
    if (!(numTokensToHold > numComputedTokens)) {
      throw new Error(`shadow ${id}: must hold more than its ${numComputedTokens} computed tokens`);
    }
    if (chain.numComputedTokens < numComputedTokens) {
      throw new Error(
        `chain ${chain.requestId} has ${chain.numComputedTokens} computed tokens, ` +
          `shadow ${id} needs ${numComputedTokens}`,
      );
    }
    const bs = this.blockSize;
    const numShared = Math.floor(numComputedTokens / bs);
    const partial = numComputedTokens % bs !== 0;
    const numTail = Math.ceil(numTokensToHold / bs) - numShared;
    const chainTables = this.#coordinator.managers.map((m, g) => {
      const table = m.table(chain.requestId);
      if (!table || table.length < numShared + (partial ? 1 : 0)) {
        throw new Error(
          `chain ${chain.requestId} holds too few blocks in group ${g} for a shadow at ` +
            `${numComputedTokens} tokens`,
        );
      }
      return table;
    });
    const need = numTail * this.numGroups;
    if (need > this.pool.numFreeBlocks - this.watermarkBlocks) return false;

    const tails = chainTables.map(() => this.pool.getNewBlocks(numTail));
    const record: RequestRecord = { lastReadStep: 0, cacheable: false, copies: [], zeros: [] };
    chainTables.forEach((table, g) => {
      const shared = table.blocks.slice(0, numShared);
      this.pool.touch(shared);
      if (cow && partial) {
        const src = table.at(numShared);
        this.pool.touch([src]);
        record.copies.push({ src, dst: tails[g][0] });
        this.#numPendingCopies++;
      } else if (partial) {
        record.zeros.push(tails[g][0]);
      }
      this.#coordinator.managers[g].adopt(id, [...shared, ...tails[g]], numShared);
    });
    this.#records.set(id, record);
    if (record.copies.length > 0 || record.zeros.length > 0) this.#withCopies.add(id);
    return true;
  }

  /**
   * Issues the next step: the listed requests' blocks are read by it (their frees wait
   * for it), and every copy and zero-fill not yet issued rides it. Returns its id, its
   * copies and the blocks it zero-fills (before the copies).
   */
  beginStep(
    requestIds: Iterable<string>,
  ): { stepId: number; blockCopies: BlockCopy[]; blockZeros: number[] } {
    const stepId = this.#fence.beginStep();
    for (const id of requestIds) {
      const record = this.#records.get(id);
      if (record) record.lastReadStep = stepId;
    }
    const blockCopies: BlockCopy[] = [];
    const blockZeros: number[] = [];
    for (const id of this.#withCopies) {
      const record = this.#records.get(id)!;
      for (const block of record.zeros) blockZeros.push(block.blockId);
      record.zeros = [];
      if (record.copies.length === 0) continue;
      record.lastReadStep = stepId;
      for (const { src, dst } of record.copies) {
        blockCopies.push([src.blockId, dst.blockId]);
        this.#fence.defer(stepId, [src]);
      }
      this.#numPendingCopies -= record.copies.length;
      record.copies = [];
    }
    this.#withCopies.clear();
    return { stepId, blockCopies, blockZeros };
  }

  /** Marks step `stepId` complete and frees the blocks its fence held. */
  completeStep(stepId: number): void {
    this.pool.freeBlocks(this.#fence.completeStep(stepId));
  }

  /**
   * Forgets every prefix-cache entry; refused (false) while any block is held or a
   * deferred free still waits on an in-flight step.
   */
  resetPrefixCache(): boolean {
    return this.#fence.numPending === 0 && this.pool.resetPrefixCache();
  }

  #assertPrivateWrites(requestId: string, from: number, to: number): void {
    const first = Math.floor(from / this.blockSize);
    const last = Math.ceil(to / this.blockSize);
    for (const m of this.#coordinator.managers) {
      const table = m.table(requestId);
      if (!table) continue;
      for (let i = first; i < Math.min(last, table.length); i++) {
        const block = table.at(i);
        if (block.refCnt > 1) {
          throw new Error(
            `request ${requestId} would write into block ${block.blockId}, which has ` +
              `${block.refCnt} holders: fork the shared tail first (forkTail)`,
          );
        }
      }
    }
  }
}
