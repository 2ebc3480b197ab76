/**
 * A plain request record for KV tests: the fields the KV layer reads, nothing more
 * (the engine's Request carries the same fields).
 */
import type { BlockHash } from "../../src/kv/block_hash.ts";
import type { KvRequest } from "../../src/kv/kv_request.ts";

export class KvTestRequest implements KvRequest {
  numComputedTokens = 0;
  readonly blockHashes: BlockHash[] = [];
  constructor(
    readonly requestId: string,
    readonly tokenIds: number[],
    readonly cacheSalt: string | null = null,
  ) {}
}

/** Tokens 1..n. */
export function iota(n: number, from = 1): number[] {
  return Array.from({ length: n }, (_, i) => from + i);
}
