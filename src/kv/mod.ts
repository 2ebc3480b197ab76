/**
 * The KV layer: paged KV blocks with prefix caching. Plain TypeScript; imports nothing
 * from the engine, the model (but its plain types) or the GPU.
 */
export {
  blockExtraKeys,
  type BlockHash,
  extendBlockHashes,
  hashBlockTokens,
} from "./block_hash.ts";
export { BlockPool, type KvPoolUsage } from "./block_pool.ts";
export { BlockTable } from "./block_table.ts";
export { DeferredFreeFence } from "./deferred_free_fence.ts";
export { FreeBlockQueue } from "./free_block_queue.ts";
export { FullAttentionManager } from "./full_attention_manager.ts";
export { KvCacheBlock } from "./kv_cache_block.ts";
export { KvCacheCoordinator } from "./kv_cache_coordinator.ts";
export { FULL_ATTENTION_GROUP, type KvCacheGroupSpec } from "./kv_cache_group.ts";
export {
  type BlockCopy,
  type CacheHit,
  type KvCacheConfig,
  KvCacheManager,
  type KvCacheUsage,
  NO_CACHE_HIT,
} from "./kv_cache_manager.ts";
export type { KvRequest } from "./kv_request.ts";
