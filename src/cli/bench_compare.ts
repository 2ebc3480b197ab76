/**
 * `deno task bench-compare A.json B.json [--bound PCT] [--all]`: the repeatability of two
 * runs of the same points (e.g. the same manifest twice): per point the relative difference
 * of the wall-time estimates and the GPU times, and how many points are within the bound.
 * Prints the points outside it (every point with --all), then one summary line per kind.
 *
 * Exit codes: 0 every point in both runs and within the bound, 1 some outside it or measured in
 * one run only, 2 bad usage or unreadable artifacts.
 */
import process from "node:process";
import { readArtifact } from "../report/latency_library.ts";
import { absSpread, compareRuns, type PointComparison } from "../report/repeatability.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { InputError, runCli } from "./run_cli.ts";

const SPEC = {
  bound: { type: "number", default: 2, min: 0, help: "percent two runs may differ by per point" },
  all: { type: "boolean", default: false, help: "print every point, not only those outside" },
} as const;

const pct = (x: number | null) => (x === null ? "-" : `${(x * 100).toFixed(2)}%`);
const ms = (x: number | null) => (x === null ? "-" : (x * 1000).toFixed(3));

await runCli(() => {
  const opts = parseArgs(
    "bench-compare",
    "Per-point repeatability of two benchmark runs of the same points.",
    SPEC,
    process.argv.slice(2),
    "A.json B.json",
  );
  if (opts._.length !== 2) throw new UsageError("name two artifacts: A.json B.json");
  const [a, b] = opts._.map((p) => {
    try {
      return readArtifact(userPath(p));
    } catch (err) {
      throw new InputError((err as Error).message);
    }
  });
  const bound = opts.bound / 100;
  const c = compareRuns(a, b, bound);
  if (c.points.length === 0) throw new InputError("the two runs have no point in common");
  const outside = (p: PointComparison) => Math.abs(p.wallDiff) > bound;
  const shown = opts.all ? c.points : c.points.filter(outside);
  if (shown.length > 0) {
    console.log(formatTable(
      [
        "point",
        "rank",
        "estimate",
        "wall A ms",
        "wall B ms",
        "wall diff",
        "GPU A ms",
        "GPU B ms",
        "GPU diff",
      ],
      shown.map((p) => [
        p.key,
        String(p.rank),
        p.method,
        ms(p.wallA),
        ms(p.wallB),
        pct(p.wallDiff),
        ms(p.gpuA),
        ms(p.gpuB),
        pct(p.gpuDiff),
      ]),
    ));
  }
  for (const kind of ["decode", "prefill"]) {
    const pts = c.points.filter((p) => p.key.startsWith(`${kind}:`));
    if (pts.length === 0) continue;
    const wall = absSpread(pts.map((p) => p.wallDiff));
    const gpus = pts.flatMap((p) => (p.gpuDiff === null ? [] : [p.gpuDiff]));
    const gpu = absSpread(gpus);
    const within = pts.filter((p) => !outside(p)).length;
    console.log(
      `${kind}: ${within}/${pts.length} points within ${opts.bound}% on wall ` +
        `(median ${pct(wall.median)}, max ${pct(wall.max)}); GPU ${
          gpus.filter((g) => Math.abs(g) <= bound).length
        }/${gpus.length} (median ${pct(gpu.median)}, max ${pct(gpu.max)})`,
    );
  }
  if (c.onlyA.length || c.onlyB.length) {
    console.log(
      `in one run only (a repeatability failure): A ${c.onlyA.length} points ` +
        `(${c.onlyA.slice(0, 5).join(", ")}), B ${c.onlyB.length} (${
          c.onlyB.slice(0, 5).join(", ")
        })`,
    );
  }
  const complete = c.onlyA.length === 0 && c.onlyB.length === 0;
  return c.wallWithin === c.points.length && complete ? 0 : 1;
});
