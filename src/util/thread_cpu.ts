/**
 * The CPU the calling thread runs on now, from Linux's `/proc/thread-self/stat` (its 39th
 * field, `processor`); null where there is no such file (not Linux, or no /proc). A step trace
 * records it so a host phase can be matched to the core it ran on.
 *
 * ```ts
 * const cpu = threadCpu(); // 5, or null
 * ```
 */
import { readFileSync } from "node:fs";

let readable = true;

export function threadCpu(): number | null {
  if (!readable) return null;
  try {
    return processorField(readFileSync("/proc/thread-self/stat", "utf8"));
  } catch {
    readable = false;
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
