import type { BlockHash } from "./block_hash.ts";
import type { BlockPool } from "./block_pool.ts";
import { FullAttentionManager } from "./full_attention_manager.ts";
import type { KvCacheBlock } from "./kv_cache_block.ts";
import type { KvCacheGroupSpec } from "./kv_cache_group.ts";

/**
 * The coordinator over the per-group KV managers: one call from the KV cache manager
 * becomes one call per group, and a prefix hit is the longest prefix that every group
 * has cached. All groups share one block pool.
 */
export class KvCacheCoordinator {
  /** One manager per KV group, in group order. */
  readonly managers: readonly FullAttentionManager[];

  /** Builds one manager per group over `pool`. */
  constructor(readonly pool: BlockPool, groups: readonly KvCacheGroupSpec[]) {
    if (groups.length === 0) throw new Error("a KV cache needs at least one group");
    this.managers = groups.map((spec, g) => {
      if (spec.kind !== "full_attention") {
        throw new Error(`KV group ${g}: attention kind "${spec.kind}" is not supported`);
      }
      return new FullAttentionManager(g, pool);
    });
  }

  /** Number of KV groups. */
  get numGroups(): number {
    return this.managers.length;
  }

  /** True when the request holds blocks (in any group). */
  holds(requestId: string): boolean {
    return this.managers.some((m) => m.table(requestId) !== undefined);
  }

  /** Longest prefix of at most `maxNumBlocks` blocks cached in every group. */
  findLongestCacheHit(
    hashes: readonly BlockHash[],
    tokens: ArrayLike<number>,
    maxNumBlocks: number,
  ): KvCacheBlock[][] {
    let limit = maxNumBlocks;
    const hits: KvCacheBlock[][] = [];
    for (const m of this.managers) {
      const h = m.findLongestCacheHit(hashes, tokens, limit);
      hits.push(h);
      limit = h.length;
    }
    // Each group's hits are a prefix of the same chain: cut all to the shortest.
    return hits.map((h) => h.slice(0, limit));
  }

  /** Blocks the pool must hand out, summed over groups. */
  numBlocksToAllocate(
    requestId: string,
    numTokens: number,
    newComputedBlocks: readonly (readonly KvCacheBlock[])[],
  ): number {
    let n = 0;
    this.managers.forEach((m, g) => {
      n += m.numBlocksToAllocate(requestId, numTokens, newComputedBlocks[g] ?? []);
    });
    return n;
  }

  /** Saves each group's hits (already touched). */
  saveNewComputedBlocks(requestId: string, blocks: readonly (readonly KvCacheBlock[])[]): void {
    this.managers.forEach((m, g) => m.saveNewComputedBlocks(requestId, blocks[g] ?? []));
  }

  /** Takes new blocks in every group so the request covers `numTokens` tokens. */
  allocateNewBlocks(requestId: string, numTokens: number): KvCacheBlock[][] {
    return this.managers.map((m) => m.allocateNewBlocks(requestId, numTokens));
  }

  /** Registers full blocks of the first `numTokens` tokens in every group. */
  cacheBlocks(
    requestId: string,
    hashes: readonly BlockHash[],
    tokens: ArrayLike<number>,
    numTokens: number,
  ): void {
    for (const m of this.managers) m.cacheBlocks(requestId, hashes, tokens, numTokens);
  }

  /** Forgets the request everywhere; its blocks, each group tail first. */
  remove(requestId: string): KvCacheBlock[] {
    return this.managers.flatMap((m) => m.remove(requestId));
  }
}
