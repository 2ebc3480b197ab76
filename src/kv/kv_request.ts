import type { BlockHash } from "./block_hash.ts";

/**
 * What the KV layer needs to know of a request: its id, the token ids whose values are
 * known on the host (prompt, then arrived outputs; a placeholder for an output still in
 * flight is not among them), how many tokens are computed, its `cache_salt`, and the
 * list of its block hashes, which the KV manager extends as full blocks become known.
 * The engine's Request implements it; the KV layer never changes anything but
 * `blockHashes`.
 */
export interface KvRequest {
  /** Unique id. */
  readonly requestId: string;
  /** Known token ids, position order. */
  readonly tokenIds: ArrayLike<number>;
  /** Tokens whose K/V are computed (or scheduled to be, by a step already issued). */
  readonly numComputedTokens: number;
  /** Salt that enters block 0's hash only; null for none. */
  readonly cacheSalt: string | null;
  /** Hashes of the request's full known blocks, block 0 first (extended by the KV manager). */
  readonly blockHashes: BlockHash[];
}
