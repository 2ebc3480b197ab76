import { KvCacheBlock } from "./kv_cache_block.ts";

/**
 * The free queue of the block pool, in eviction order: the block freed least recently
 * sits at the front and is handed out (and, if cached, evicted) first.
 *
 * A doubly linked list threaded through the blocks themselves (`prevFree` / `nextFree`)
 * between two sentinels, so `remove` of a block touched by a prefix-cache hit is O(1).
 *
 * ```ts
 * const blocks = [new KvCacheBlock(1), new KvCacheBlock(2)];
 * const queue = new FreeBlockQueue(blocks);
 * queue.popLeft().blockId; // 1
 * queue.append(blocks[0]); // 2, 1
 * ```
 */
export class FreeBlockQueue {
  readonly #head = new KvCacheBlock(-1);
  readonly #tail = new KvCacheBlock(-1);
  #length = 0;

  /** Builds the queue holding `blocks` in the given order. */
  constructor(blocks: readonly KvCacheBlock[] = []) {
    this.#head.nextFree = this.#tail;
    this.#tail.prevFree = this.#head;
    for (const block of blocks) this.append(block);
  }

  /** Number of blocks in the queue. */
  get length(): number {
    return this.#length;
  }

  /** True when `block` is in this queue. */
  has(block: KvCacheBlock): boolean {
    return block.prevFree !== null;
  }

  /** Removes and returns the front (least recently freed) block. */
  popLeft(): KvCacheBlock {
    const block = this.#head.nextFree!;
    if (block === this.#tail) throw new Error("free block queue is empty");
    this.remove(block);
    return block;
  }

  /** Removes and returns the `n` front blocks, front first. */
  popLeftN(n: number): KvCacheBlock[] {
    if (n > this.#length) {
      throw new Error(`cannot pop ${n} blocks from a free queue of ${this.#length}`);
    }
    const out = new Array<KvCacheBlock>(n);
    for (let i = 0; i < n; i++) out[i] = this.popLeft();
    return out;
  }

  /** Unlinks `block` from anywhere in the queue in O(1). */
  remove(block: KvCacheBlock): void {
    const prev = block.prevFree, next = block.nextFree;
    if (prev === null || next === null) {
      throw new Error(`block ${block.blockId} is not in the free queue`);
    }
    prev.nextFree = next;
    next.prevFree = prev;
    block.prevFree = null;
    block.nextFree = null;
    this.#length--;
  }

  /** Adds `block` at the back (it will be evicted last). */
  append(block: KvCacheBlock): void {
    if (block.prevFree !== null) {
      throw new Error(`block ${block.blockId} is already in the free queue`);
    }
    const last = this.#tail.prevFree!;
    last.nextFree = block;
    block.prevFree = last;
    block.nextFree = this.#tail;
    this.#tail.prevFree = block;
    this.#length++;
  }

  /** Adds `blocks` at the back, in order. */
  appendN(blocks: readonly KvCacheBlock[]): void {
    for (const block of blocks) this.append(block);
  }

  /** The blocks front to back (eviction order). */
  *[Symbol.iterator](): IterableIterator<KvCacheBlock> {
    for (let b = this.#head.nextFree!; b !== this.#tail; b = b.nextFree!) yield b;
  }
}
