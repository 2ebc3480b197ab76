/**
 * Token ids of texts under one tokenizer, kept on disk between runs. The real-text pool's
 * chunks and kvwarm's conversations are the same texts run after run, and tokenizing them,
 * with the Qwen3 vocabulary's load, took 2.4-5.0 s of a bench's set-up on the H200's hosts
 * (2026-12-02; 2.6 s on lavapipe's host) and more of kvwarm's plan at long contexts (409k
 * tokens of chain content at a max-model-len of 8192).
 *
 * The cache is a file per tokenizer, named by the sha256 of what decides its ids (its
 * tokenizer.json, the tokenizer_config.json beside it, the tokenizer library's version),
 * holding (sha256 of a text, its ids) records. {@link cachedTokenizer} wraps a tokenizer that
 * it loads only on the first text the file does not hold (a failed load is thrown again at
 * every later miss, not retried), and `flush` writes the file anew when texts were added,
 * merged with what the file holds by then (another rank's texts) and through a temporary file
 * renamed over it, so a reader never sees half of one. A file that cannot be read is ignored
 * and rewritten; one that cannot be written costs the next run its time, never this run its
 * result.
 *
 * ```ts
 * const tok = cachedTokenizer(tokenizerJson, () => ModelTokenizer.fromFile(tokenizerJson), dir);
 * tok.encode("Hello"); // from the file when a run before tokenized "Hello"
 * tok.flush?.();
 * ```
 */
import { Buffer } from "node:buffer";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import process from "node:process";
import type { PoolTokenizer } from "./text_pool.ts";
import { projectRoot } from "../util/project_root.ts";

/** The file's first bytes (a format change gets a new magic, and old files are rebuilt). */
const MAGIC = "webfpm-tokens-v1";

/** Where the caches live: WEBFPM_CACHE_DIR, else `.cache/tokens` in the project's root. */
export function tokenCacheDir(): string {
  return process.env.WEBFPM_CACHE_DIR ?? join(projectRoot(), ".cache", "tokens");
}

/** sha256 of a text, hex. */
function textKey(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/** The tokenizer library's version (its ids may change with it). */
function libraryVersion(): string {
  try {
    const require = createRequire(import.meta.url);
    return JSON.parse(readFileSync(require.resolve("@huggingface/tokenizers/package.json"), "utf8"))
      .version;
  } catch {
    return "unknown";
  }
}

/**
 * The cache file in `dir` of the tokenizer at `tokenizerJson`: named by the sha256 of its
 * bytes, the tokenizer_config.json beside it (ModelTokenizer reads both) and the library's
 * version.
 */
export function tokenCacheFile(dir: string, tokenizerJson: string): string {
  const hash = createHash("sha256").update(MAGIC).update(libraryVersion()).update("\0");
  hash.update(readFileSync(tokenizerJson)).update("\0");
  const config = join(dirname(tokenizerJson), "tokenizer_config.json");
  hash.update(existsSync(config) ? readFileSync(config) : "no config");
  return join(dir, `${hash.digest("hex").slice(0, 32)}.bin`);
}

/** The records of a cache file; an empty map when it is missing or not one. */
export function readTokenCache(file: string): Map<string, Int32Array> {
  const records = new Map<string, Int32Array>();
  if (!existsSync(file)) return records;
  try {
    const bytes = readFileSync(file);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (bytes.subarray(0, MAGIC.length).toString("latin1") !== MAGIC) return records;
    let at = MAGIC.length;
    while (at < bytes.length) {
      const key = bytes.subarray(at, at + 32).toString("hex");
      const n = view.getUint32(at + 32, true);
      const start = at + 36;
      const end = start + 4 * n;
      if (end > bytes.length) throw new Error("truncated");
      const ids = new Int32Array(n);
      for (let i = 0; i < n; i++) ids[i] = view.getInt32(start + 4 * i, true);
      records.set(key, ids);
      at = end;
    }
  } catch {
    records.clear();
  }
  return records;
}

/** Writes `records` as the cache file (a temporary file renamed over it). */
export function writeTokenCache(file: string, records: ReadonlyMap<string, Int32Array>): void {
  let size = MAGIC.length;
  for (const ids of records.values()) size += 36 + 4 * ids.length;
  const bytes = new Uint8Array(size);
  const view = new DataView(bytes.buffer);
  bytes.set(new TextEncoder().encode(MAGIC), 0);
  let at = MAGIC.length;
  for (const [key, ids] of records) {
    bytes.set(Buffer.from(key, "hex"), at);
    view.setUint32(at + 32, ids.length, true);
    for (let i = 0; i < ids.length; i++) view.setInt32(at + 36 + 4 * i, ids[i], true);
    at += 36 + 4 * ids.length;
  }
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}-${randomBytes(4).toString("hex")}.tmp`;
  try {
    writeFileSync(tmp, bytes);
    renameSync(tmp, file);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

/**
 * `load()`'s tokenizer (tokenizer.json at `tokenizerJson`) behind the cache in `dir`: loaded
 * on the first text the cache does not hold. `flush` writes the texts added since.
 */
export function cachedTokenizer(
  tokenizerJson: string,
  load: () => PoolTokenizer,
  dir: string = tokenCacheDir(),
): PoolTokenizer {
  const file = tokenCacheFile(dir, tokenizerJson);
  const records = readTokenCache(file);
  const added = new Map<string, Int32Array>();
  let tokenizer: PoolTokenizer | null = null;
  let loadError: unknown = null;
  const loaded = (): PoolTokenizer => {
    if (tokenizer) return tokenizer;
    if (loadError !== null) throw loadError;
    try {
      return tokenizer = load();
    } catch (err) {
      loadError = err;
      throw err;
    }
  };
  return {
    path: tokenizerJson,
    encode(text: string): Int32Array {
      const key = textKey(text);
      const hit = records.get(key);
      if (hit) return hit.slice();
      const ids = loaded().encode(text);
      const kept = ids.slice();
      records.set(key, kept);
      added.set(key, kept);
      return ids;
    },
    flush(): void {
      if (added.size === 0) return;
      try {
        // what another process wrote since this one read the file, and this one's texts
        const merged = readTokenCache(file);
        for (const [key, ids] of added) merged.set(key, ids);
        writeTokenCache(file, merged);
        added.clear();
      } catch (err) {
        console.warn(`token cache: cannot write ${file}: ${(err as Error).message}`);
      }
    },
  };
}
