/**
 * The real-text token pool: sentences of the `nlp-corpus` npm package (a runtime
 * dependency, carried by the offline bundle), pinned by the sha256 of its 100 data
 * files. A body whose `sha256(body)[0]` is even belongs to the collection pool, the
 * others are held out for evaluation. Collection bodies are tokenized in dataset order
 * with the model's tokenizer (no special tokens) until the pool holds the tokens asked
 * for; prompts are windows of it (see `textContent`).
 *
 * Failures carry the design's skip reasons (`dataset_unavailable:<why>`,
 * `tokenizer_unavailable:<why>`) so kvwarm's gate can reuse this loader.
 *
 * ```ts
 * const pool = loadTextPool(tokenizer, { minTokens: 131072, vocabSize: 151936 });
 * pool.tokens.length; // >= 131072
 * ```
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { TextPoolInfo } from "./artifact.ts";
import { heldCache } from "../util/held_cache.ts";

/** The dataset package. */
export const TEXT_DATASET_PACKAGE = "nlp-corpus";
/** Its pinned version. */
export const TEXT_DATASET_VERSION = "4.4.0";
/** sha256 of builds/doc-0.json .. doc-99.json, concatenated in numeric order. */
export const TEXT_DATASET_SHA256 =
  "50deb0d9479933db1443bcf72fe7f4216c949e97479fd76fdd322aaf0b757d1a";
const NUM_FILES = 100;
const CHUNK_CHARS = 16384;

/** What the pool needs from a tokenizer. */
export interface PoolTokenizer {
  /** Ids of `text`, no special tokens added. */
  encode(text: string): Int32Array;
  /** Where it was loaded from. */
  readonly path: string;
  /** Keeps what it tokenized for later runs (a cached tokenizer, token_cache.ts). */
  flush?(): void;
}

/** The dataset or tokenizer cannot give a pool; `skipReason` is the design's. */
export class TextPoolError extends Error {
  /** `dataset_unavailable:<why>` or `tokenizer_unavailable:<why>`. */
  readonly skipReason: string;

  /** A failure with its skip reason and a message for people. */
  constructor(skipReason: string, message: string) {
    super(`${skipReason}: ${message}`);
    this.name = "TextPoolError";
    this.skipReason = skipReason;
  }
}

/** A loaded pool. */
export interface TextPool {
  /** Token ids. */
  readonly tokens: Int32Array;
  /** Provenance for the artifact. */
  readonly info: TextPoolInfo;
}

/** The dataset's bodies (sentences), verified against the pinned sha256. */
export function loadTextBodies(): { bodies: string[]; version: string } {
  let builds: string;
  let version: string;
  try {
    // The package exports only its entry point (src/server/index.js), two folders down.
    const root = join(
      dirname(createRequire(import.meta.url).resolve(TEXT_DATASET_PACKAGE)),
      "..",
      "..",
    );
    version = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).version;
    builds = join(root, "builds");
  } catch (err) {
    throw new TextPoolError(
      "dataset_unavailable:package_missing",
      `npm package ${TEXT_DATASET_PACKAGE} not found (${
        (err as Error).message
      }); run scripts/setup`,
    );
  }
  const hash = createHash("sha256");
  const files: Buffer[] = [];
  for (let i = 0; i < NUM_FILES; i++) {
    const path = join(builds, `doc-${i}.json`);
    if (!existsSync(path)) {
      throw new TextPoolError("dataset_unavailable:file_missing", `${path} is missing`);
    }
    const bytes = readFileSync(path);
    hash.update(bytes);
    files.push(bytes);
  }
  const digest = hash.digest("hex");
  if (digest !== TEXT_DATASET_SHA256) {
    throw new TextPoolError(
      "dataset_unavailable:sha256_mismatch",
      `${TEXT_DATASET_PACKAGE}@${version} data has sha256 ${digest}, pinned ${TEXT_DATASET_SHA256}`,
    );
  }
  const bodies: string[] = [];
  for (const bytes of files) {
    const list = JSON.parse(bytes.toString("utf8"));
    for (const body of list) if (typeof body === "string" && body.length > 0) bodies.push(body);
  }
  return { bodies, version };
}

/** True when `body` belongs to the collection pool (`sha256(body)[0]` even). */
export function isCollectionBody(body: string): boolean {
  return createHash("sha256").update(body).digest()[0] % 2 === 0;
}

/** The collection pool of a body list. */
export interface TextCollection {
  /** The collection bodies, in dataset order. */
  readonly collection: readonly string[];
  /** Bodies in the dataset (both halves). */
  readonly bodies: number;
  /** The dataset's version. */
  readonly version: string;
}

/** The collection pool of `corpus` (every body's sha256). */
export function collectionOf(
  corpus: { bodies: readonly string[]; version: string },
): TextCollection {
  return {
    collection: corpus.bodies.filter(isCollectionBody),
    bodies: corpus.bodies.length,
    version: corpus.version,
  };
}

const heldCollection = heldCache((_: "collection") => collectionOf(loadTextBodies()));

/**
 * The dataset's collection pool, verified. A pool still held by someone (the text pool's
 * loader and kvwarm's gate in one run) is handed out again rather than read, hashed and
 * split a second time; the cache itself keeps nothing alive.
 */
export function loadCollection(): TextCollection {
  return heldCollection("collection");
}

/**
 * Builds the pool: collection bodies in dataset order, tokenized in chunks of whole
 * bodies joined by newlines, until at least `minTokens` tokens (or the whole
 * collection). Every id must be below `vocabSize`.
 */
export function loadTextPool(
  tokenizer: PoolTokenizer,
  options: { readonly minTokens: number; readonly vocabSize: number },
): TextPool {
  const { collection, bodies, version } = loadCollection();
  const parts: Int32Array[] = [];
  let total = 0;
  let used = 0;
  let chunk = "";
  const flush = () => {
    if (chunk.length === 0) return;
    let ids: Int32Array;
    try {
      ids = tokenizer.encode(chunk);
    } catch (err) {
      // (a cached tokenizer loads its vocabulary at the first text it does not hold)
      if (err instanceof TextPoolError) throw err;
      throw new TextPoolError("tokenizer_unavailable:encode_failed", (err as Error).message);
    }
    for (const id of ids) {
      if (id < 0 || id >= options.vocabSize) {
        throw new TextPoolError(
          "tokenizer_unavailable:vocab_mismatch",
          `${tokenizer.path} gives id ${id}, outside the model's vocabulary of ${options.vocabSize}`,
        );
      }
    }
    parts.push(ids);
    total += ids.length;
    chunk = "";
  };
  for (const body of collection) {
    if (total >= options.minTokens) break;
    chunk += body + "\n";
    used++;
    if (chunk.length >= CHUNK_CHARS) flush();
  }
  flush();
  tokenizer.flush?.();
  const tokens = new Int32Array(total);
  let at = 0;
  for (const p of parts) {
    tokens.set(p, at);
    at += p.length;
  }
  return {
    tokens,
    info: {
      package: TEXT_DATASET_PACKAGE,
      version,
      sha256: TEXT_DATASET_SHA256,
      collection_pool: "sha256(body)[0] even",
      bodies,
      collection_bodies: collection.length,
      bodies_used: used,
      tokens: total,
      tokenizer: tokenizer.path,
    },
  };
}
