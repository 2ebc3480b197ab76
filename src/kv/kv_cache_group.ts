/**
 * One KV cache group: a set of layers that share a block table layout and an
 * attention type. Every model today has exactly one full-attention group; the
 * interfaces take a list so a hybrid model (sliding window, state layers) can add
 * groups without changing callers.
 */
export interface KvCacheGroupSpec {
  /** Attention type of the group's layers. Only full attention exists so far. */
  readonly kind: "full_attention";
}

/** The single full-attention group every current model uses. */
export const FULL_ATTENTION_GROUP: KvCacheGroupSpec = Object.freeze({ kind: "full_attention" });
