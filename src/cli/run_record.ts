/**
 * The fields every perf task's JSON starts with: the day, the adapter and the commit the figures
 * were measured on.
 *
 * ```ts
 * writeJsonAtomic(path, { ...runRecord(gpu), points });
 * ```
 */
import type { Gpu } from "../gpu/device.ts";
import { gitCommit } from "../util/git_commit.ts";

export function runRecord(gpu: Gpu): { date: string; adapter: string; commit: string } {
  return {
    date: new Date().toISOString().slice(0, 10),
    adapter: gpu.adapter.description,
    commit: gitCommit(),
  };
}
