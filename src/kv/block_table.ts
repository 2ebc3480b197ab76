import type { KvCacheBlock } from "./kv_cache_block.ts";

/**
 * A request's blocks in one KV group, in position order, mirrored as an Int32Array of
 * block ids so a step's block table is one typed-array copy.
 *
 * ```ts
 * const table = new BlockTable();
 * table.push([blockA, blockB]);
 * table.ids(1); // Int32Array [blockA.blockId]
 * ```
 */
export class BlockTable {
  readonly #blocks: KvCacheBlock[] = [];
  #ids = new Int32Array(8);

  /** Number of blocks. */
  get length(): number {
    return this.#blocks.length;
  }

  /** The blocks, position order (do not mutate). */
  get blocks(): readonly KvCacheBlock[] {
    return this.#blocks;
  }

  /** Block at table index `i`. */
  at(i: number): KvCacheBlock {
    const block = this.#blocks[i];
    if (block === undefined) throw new Error(`block table index ${i} out of ${this.length}`);
    return block;
  }

  /** Appends blocks. */
  push(blocks: readonly KvCacheBlock[]): void {
    const n = this.#blocks.length + blocks.length;
    if (n > this.#ids.length) {
      const grown = new Int32Array(Math.max(n, this.#ids.length * 2));
      grown.set(this.#ids.subarray(0, this.#blocks.length));
      this.#ids = grown;
    }
    for (const block of blocks) {
      this.#ids[this.#blocks.length] = block.blockId;
      this.#blocks.push(block);
    }
  }

  /** Replaces the block at index `i` (copy-on-write fork) and returns the old one. */
  replace(i: number, block: KvCacheBlock): KvCacheBlock {
    const old = this.at(i);
    this.#blocks[i] = block;
    this.#ids[i] = block.blockId;
    return old;
  }

  /** A copy of the first `n` block ids (all by default). */
  ids(n = this.#blocks.length): Int32Array {
    if (n > this.#blocks.length) {
      throw new Error(`block table has ${this.#blocks.length} blocks, ${n} requested`);
    }
    return this.#ids.slice(0, n);
  }
}
