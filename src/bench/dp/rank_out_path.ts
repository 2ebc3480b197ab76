/**
 * Where the artifacts of a group of ranks go: rank r writes `<stem>_dp<r>.json` beside
 * `--out`, and the merged view of every rank is `<stem>_merged.json` (`stem` = `--out`
 * without its extension).
 *
 * ```ts
 * rankOutPath("results/run.json", 1); // "results/run_dp1.json"
 * mergedOutPath("results/run.json");  // "results/run_merged.json"
 * ```
 */
import { extname } from "node:path";

function stem(out: string): string {
  const ext = extname(out);
  return ext === "" ? out : out.slice(0, -ext.length);
}

function extension(out: string): string {
  return extname(out) || ".json";
}

/** Rank `rank`'s artifact beside `out`. */
export function rankOutPath(out: string, rank: number): string {
  if (!Number.isSafeInteger(rank) || rank < 0) throw new RangeError(`bad rank ${rank}`);
  return `${stem(out)}_dp${rank}${extension(out)}`;
}

/** The merged view beside `out`. */
export function mergedOutPath(out: string): string {
  return `${stem(out)}_merged${extension(out)}`;
}
