/**
 * The token content of kvwarm's chains: conversations of the dataset's collection half
 * (`sha256(body)[0]` even; the odd half is held out for evaluation). Chain `i` is that
 * pool shuffled by a generator seeded with `content-v1:{content_seed}:{rank}:{i}`, its
 * conversations' tokens appended in that order, each conversation tokenized once (no
 * special tokens, a newline after each) and shared by every chain that draws it. A
 * chain only ever extends: its first n tokens never change as it grows, which is what
 * lets rung k+1's chain i hit rung k's cached blocks.
 *
 * ```
 * pool [c0 c1 c2 c3 c4]   chain 0: c3 c0 c4 ...  -> tokens(0, 40) = first 40 of c3|c0|c4...
 *                         chain 1: c1 c4 c2 ...     tokens(0, 60) starts with tokens(0, 40)
 * ```
 *
 * Once the rungs are planned, {@link ChainContent.prepare} tokenizes what every chain will
 * read and lets go of the pool and the tokenizer: held through the sweep they would make
 * each point-boundary collection several times slower (the tokenizer's vocabulary alone:
 * about 50 ms a collection on lavapipe's host, against 7 ms without it).
 *
 * ```ts
 * const content = new ChainContent({ bodies, tokenizer, contentSeed: "0", rank: 0, vocabSize });
 * content.tokens(3, 4096); // chain 3's first 4096 tokens
 * content.prepare([4096, 4096, 2048]); // chains 0-2 as the plan reads them; the rest is dropped
 * ```
 */
import type { KvwarmChains } from "../artifact.ts";
import { type PoolTokenizer, TextPoolError } from "../text_pool.ts";
import { Rng } from "../../util/rng.ts";

/** The text a chain tokenizes for one conversation: its body and a newline. */
export function chainText(body: string): string {
  return body + "\n";
}

/** The seed of chain `chain`: `content-v1:{contentSeed}:{rank}:{chain}`. */
export function chainContentSeed(contentSeed: string, rank: number, chain: number): string {
  return `content-v1:${contentSeed}:${rank}:${chain}`;
}

/** What chains are made of. */
export interface ChainContentOptions {
  /** The collection pool's conversations, in dataset order. */
  readonly bodies: readonly string[];
  /** The model's tokenizer. */
  readonly tokenizer: PoolTokenizer;
  /** The content seed. */
  readonly contentSeed: string;
  /** This rank. */
  readonly rank: number;
  /** The model's vocabulary: every id must be below it. */
  readonly vocabSize: number;
}

/** What chains are drawn and tokenized from, until prepared. */
type ChainSource = Pick<ChainContentOptions, "bodies" | "tokenizer">;

/** One chain as drawn so far: a lazy Fisher-Yates shuffle of the pool and its tokens. */
interface ChainState {
  readonly rng: Rng;
  /** Positions of the virtual pool array moved by the partial shuffle. */
  readonly moved: Map<number, number>;
  /** Conversations drawn so far. */
  drawn: number;
  tokens: Int32Array;
  length: number;
}

/** Chain token content (see the module doc above). */
export class ChainContent {
  readonly #o: Omit<ChainContentOptions, "bodies" | "tokenizer">;
  /** The pool and the tokenizer, until {@link prepare} drops them. */
  #source: ChainSource | null;
  readonly #conversations: number;
  readonly #tokenizerPath: string;
  readonly #encoded = new Map<number, Int32Array>();
  readonly #chains = new Map<number, ChainState>();
  /** Prepared chains whose content failed, with the error their `tokens` throws. */
  readonly #failed = new Map<number, Error>();
  #tokensTokenized = 0;
  #conversationsTokenized = 0;
  #prepareSeconds = 0;

  /** Chains over `options.bodies`; nothing is tokenized until a chain asks. */
  constructor(options: ChainContentOptions) {
    if (options.bodies.length === 0) throw new Error("the chain content pool is empty");
    const { bodies, tokenizer, ...rest } = options;
    this.#o = rest;
    this.#source = { bodies, tokenizer };
    this.#conversations = bodies.length;
    this.#tokenizerPath = tokenizer.path;
  }

  /** Conversations in the pool. */
  get conversations(): number {
    return this.#conversations;
  }

  /** True once {@link prepare} has dropped the pool and the tokenizer. */
  get prepared(): boolean {
    return this.#source === null;
  }

  /**
   * Tokenizes chain i up to `lengths[i]` tokens for every i, then drops the pool, the
   * tokenizer and the per-conversation ids: afterwards a chain gives at most what it was
   * prepared to (asking for more is a programming error and throws), and a chain whose
   * content failed here throws that failure (a {@link TextPoolError}) when asked.
   */
  prepare(lengths: readonly number[]): void {
    const source = this.#source;
    if (source === null) throw new Error("chain content was prepared already");
    const t0 = performance.now();
    lengths.forEach((length, chain) => {
      try {
        this.tokens(chain, length);
        const s = this.#chain(chain);
        s.length = length; // past it the chain was drawn in whole conversations only
      } catch (err) {
        if (!(err instanceof TextPoolError)) throw err;
        this.#failed.set(chain, err);
      }
    });
    source.tokenizer.flush?.();
    this.#source = null;
    this.#encoded.clear();
    this.#prepareSeconds = (performance.now() - t0) / 1000;
  }

  /** Seconds {@link prepare} took (0 before it ran). */
  get prepareSeconds(): number {
    return this.#prepareSeconds;
  }

  /** Conversations tokenized so far (a release does not reset the count). */
  get conversationsTokenized(): number {
    return this.#conversationsTokenized;
  }

  /** Tokens they gave. */
  get tokensTokenized(): number {
    return this.#tokensTokenized;
  }

  /**
   * The first `length` tokens of chain `chain` (a copy). Throws a {@link TextPoolError}
   * `content_too_shallow` when the whole pool holds fewer tokens.
   */
  tokens(chain: number, length: number): Int32Array {
    if (!Number.isInteger(chain) || chain < 0) {
      throw new RangeError(`chain index must be a non-negative integer, got ${chain}`);
    }
    if (!Number.isInteger(length) || length < 0) {
      throw new RangeError(`chain length must be a non-negative integer, got ${length}`);
    }
    const source = this.#source;
    if (source === null) return this.#prepared(chain, length);
    const s = this.#chain(chain);
    const n = this.#conversations;
    while (s.length < length) {
      if (s.drawn === n) {
        throw new TextPoolError(
          "content_too_shallow",
          `chain ${chain} holds all ${n} conversations of the collection pool, ${s.length} ` +
            `tokens; ${length} are needed`,
        );
      }
      const ids = this.#encode(source, this.#draw(s, n));
      if (s.length + ids.length > s.tokens.length) {
        const grown = new Int32Array(Math.max(2 * s.tokens.length, s.length + ids.length, 1024));
        grown.set(s.tokens.subarray(0, s.length));
        s.tokens = grown;
      }
      s.tokens.set(ids, s.length);
      s.length += ids.length;
    }
    return s.tokens.slice(0, length);
  }

  /** Provenance for the artifact. */
  info(probeDepth: number, probeSeconds: number): KvwarmChains {
    return {
      content_rule: "content-v1:{content_seed}:{rank}:{i}",
      content_seed: this.#o.contentSeed,
      salt_rule: "__kvwarm_{rank}_{i}",
      conversations: this.conversations,
      conversations_tokenized: this.conversationsTokenized,
      tokens_tokenized: this.tokensTokenized,
      probe_depth: probeDepth,
      probe_seconds: probeSeconds,
      prepare_seconds: this.#prepareSeconds,
    };
  }

  /**
   * Drops every chain's tokens (benchmark-only host state); before {@link prepare} chains
   * redraw identically, after it they are gone.
   */
  release(): void {
    this.#chains.clear();
    this.#encoded.clear();
  }

  #prepared(chain: number, length: number): Int32Array {
    const failed = this.#failed.get(chain);
    if (failed) throw failed;
    const s = this.#chains.get(chain);
    if (!s || s.length < length) {
      throw new Error(
        `chain ${chain} was prepared to ${s?.length ?? 0} tokens; ${length} are asked ` +
          "(the plan and the stages disagree)",
      );
    }
    return s.tokens.slice(0, length);
  }

  #chain(chain: number): ChainState {
    let s = this.#chains.get(chain);
    if (!s) {
      s = {
        rng: Rng.fromSeed(chainContentSeed(this.#o.contentSeed, this.#o.rank, chain)),
        moved: new Map(),
        drawn: 0,
        tokens: new Int32Array(0),
        length: 0,
      };
      this.#chains.set(chain, s);
    }
    return s;
  }

  /** The next conversation of the chain's shuffle (Fisher-Yates from the front, lazily). */
  #draw(s: ChainState, n: number): number {
    const k = s.drawn++;
    const j = s.rng.int(k, n);
    const atJ = s.moved.get(j) ?? j;
    s.moved.set(j, s.moved.get(k) ?? k);
    s.moved.delete(k);
    return atJ;
  }

  #encode(source: ChainSource, body: number): Int32Array {
    let ids = this.#encoded.get(body);
    if (ids) return ids;
    try {
      ids = source.tokenizer.encode(chainText(source.bodies[body]));
    } catch (err) {
      // (a cached tokenizer loads its vocabulary at the first text it does not hold)
      if (err instanceof TextPoolError) throw err;
      throw new TextPoolError("tokenizer_unavailable:encode_failed", (err as Error).message);
    }
    for (const id of ids) {
      if (id < 0 || id >= this.#o.vocabSize) {
        throw new TextPoolError(
          "tokenizer_unavailable:vocab_mismatch",
          `${this.#tokenizerPath} gives id ${id}, outside the model's vocabulary of ` +
            this.#o.vocabSize,
        );
      }
    }
    this.#encoded.set(body, ids);
    this.#conversationsTokenized++;
    this.#tokensTokenized += ids.length;
    return ids;
  }
}
