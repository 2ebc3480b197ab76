/**
 * The CPU the calling thread runs on now, from Linux's `/proc/thread-self/stat` (its 39th
 * field, `processor`); null where there is no such file (not Linux, or no /proc). A step trace
 * records it so a host phase can be matched to the core it ran on.
 *
 * The file stays open and is read again from its start (about 8 µs a reading against 21 for an
 * open, read and close on the development machine): a traced step pays for it between steps.
 * The open file names the thread that opened it, the JS thread that calls this.
 *
 * ```ts
 * const cpu = threadCpu(); // 5, or null
 * ```
 */
import { openSync, readSync } from "node:fs";

let fd: number | null | undefined;
const buf = new Uint8Array(1024);
const text = new TextDecoder();

export function threadCpu(): number | null {
  if (fd === undefined) {
    try {
      fd = openSync("/proc/thread-self/stat", "r");
    } catch {
      fd = null;
    }
  }
  if (fd === null) return null;
  try {
    return processorField(text.decode(buf.subarray(0, readSync(fd, buf, 0, buf.length, 0))));
  } catch {
    fd = null;
    return null;
  }
}

/** The `processor` field of a /proc stat line (fields after the command's closing paren). */
export function processorField(stat: string): number | null {
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // the line's 3rd field is rest[0], so its 39th is rest[36]
  const cpu = Number(rest[36]);
  return Number.isInteger(cpu) ? cpu : null;
}
