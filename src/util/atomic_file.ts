/**
 * Atomic file writes: the data goes to a temporary file beside the target, is flushed,
 * then renamed over it, so a reader (or a crash) never sees half a file.
 *
 * ```ts
 * writeJsonAtomic("results/run.json", { status: "partial" });
 * ```
 */
import { closeSync, fsyncSync, mkdirSync, openSync, renameSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import process from "node:process";

/** Writes `data` to `path` atomically (creating the folder). */
export function writeFileAtomic(path: string, data: string | Uint8Array): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  const fd = openSync(tmp, "w");
  try {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    // writeSync may write less than asked (a full disk, a signal): write the rest, or throw
    for (let done = 0; done < bytes.length;) {
      const n = writeSync(fd, bytes, done, bytes.length - done);
      if (n <= 0) throw new Error(`${path}: wrote ${done} of ${bytes.length} bytes`);
      done += n;
    }
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

/** Writes `value` as indented JSON, atomically. */
export function writeJsonAtomic(path: string, value: unknown): void {
  writeFileAtomic(path, JSON.stringify(value, null, 1) + "\n");
}
