/**
 * `deno task bench-merge --out PATH --dp N`: merges the artifacts of an attention-DP run
 * (`<stem>_dp0.json` .. `<stem>_dp<N-1>.json` beside PATH, e.g. copied from several
 * hosts into one folder) into `<stem>_merged.json`: every rank's FPM rows per point, the
 * group walls (max over ranks), the worst status, and each rank's outcome and per-step
 * barrier cost. `deno task bench --dp N` does this itself.
 *
 * Exit codes: 0 merged, 2 bad usage or artifacts that cannot be merged.
 */
import process from "node:process";
import { mergedOutPath, MergeError, mergeRankFiles, stepRoundLine } from "../bench/dp/mod.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { InputError, runCli } from "./run_cli.ts";

const SPEC = {
  out: { type: "string", help: "the --out the ranks were given (their files are beside it)" },
  dp: { type: "number", integer: true, min: 1, help: "ranks in the group" },
} as const;

await runCli(() => {
  const opts = parseArgs(
    "bench-merge",
    "Merges the per-rank artifacts of an attention-DP benchmark run into one view.",
    SPEC,
    process.argv.slice(2),
  );
  if (opts.out === undefined) throw new UsageError("--out is required");
  if (opts.dp === undefined) throw new UsageError("--dp is required");
  const out = userPath(opts.out);
  let merged;
  try {
    merged = mergeRankFiles(out, opts.dp);
  } catch (err) {
    if (err instanceof MergeError) throw new InputError(err.message);
    throw err;
  }
  const path = mergedOutPath(out);
  writeJsonAtomic(path, merged);
  for (const s of merged.attention_dp?.merged_ranks ?? []) {
    console.log(
      `rank ${s.rank}: ${s.status} (${s.stop_reason}), ${s.points_measured} points` +
        (s.error ? `; error: ${s.error}` : ""),
    );
    if (s.step_round) console.log(stepRoundLine(s.rank, s.step_round, s.idle_barrier));
  }
  console.log(
    `merged: ${merged.results.length} points measured on all ${opts.dp} ranks, ` +
      `${merged.skipped_points.length} skipped, status ${merged.status}`,
  );
  console.error(`bench-merge: wrote ${path}`);
  return 0;
});
