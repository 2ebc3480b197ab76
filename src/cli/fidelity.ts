/**
 * `deno task fidelity --library ARTIFACT[,ARTIFACT...] --served STEPS.jsonl [--metric
 * interval|wall|gpu] [--method grid|fit|both] [--regime R,...] [--skip-steps N] [--json FILE]`:
 * the latency library's error on every served step of a replay: MAPE, p50 and p90
 * absolute percentage error, overall, by step kind and by kv_seed_regime.
 */
import { readFileSync, writeFileSync } from "node:fs";
import process from "node:process";
import { fidelity, LATE_ARRIVAL_SHARE } from "../report/fidelity.ts";
import { libraryRows, readArtifact } from "../report/latency_library.ts";
import type { PredictMethod } from "../report/latency_predictor.ts";
import { parseServedSteps, type StepMetric } from "../report/served_steps.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { InputError, runCli } from "./run_cli.ts";

const SPEC = {
  library: { type: "list", help: "benchmark artifact(s), comma-separated" },
  served: { type: "string", help: "step log of a replay (deno task replay --out)" },
  metric: {
    type: "string",
    values: ["interval", "wall", "gpu"],
    default: "interval",
    help: "served time to compare: pipeline interval, schedule-to-output wall, or GPU time",
  },
  method: { type: "string", values: ["grid", "fit", "both"], default: "both", help: "predictor" },
  regime: { type: "list", help: "only rows of these kv_seed_regime values for the overall lines" },
  skipSteps: {
    type: "number",
    integer: true,
    min: 0,
    default: 0,
    help: "ignore the first N served steps",
  },
  json: { type: "string", help: "also write the report as JSON" },
} as const;

await runCli(() => {
  const opts = parseArgs(
    "fidelity",
    "Scores a latency library against the steps of served traffic.",
    SPEC,
    process.argv.slice(2),
  );
  if (!opts.library?.length) throw new UsageError("--library is required");
  if (!opts.served) throw new UsageError("--served is required");
  let rows, log;
  try {
    rows = libraryRows(opts.library.map((p) => readArtifact(userPath(p))));
    log = parseServedSteps(readFileSync(userPath(opts.served), "utf8"), opts.served);
  } catch (err) {
    throw new InputError((err as Error).message);
  }
  const methods: PredictMethod[] = opts.method === "both"
    ? ["grid", "fit"]
    : [opts.method as PredictMethod];
  const report = fidelity(rows, log.steps, {
    metric: opts.metric as StepMetric,
    methods,
    regimes: opts.regime,
    skipSteps: opts.skipSteps,
  });
  const pct = (x: number | null) => (x === null ? "-" : x.toFixed(2));
  console.log(
    `${report.steps} served steps (${report.untimed} without a ${report.metric} time), ` +
      `${rows.length} library rows; errors in % of the served ${report.metric} time`,
  );
  if (report.coalesced) {
    console.log(
      `${report.coalesced} steps joined with the step before them: their interval was under ` +
        `${LATE_ARRIVAL_SHARE * 100}% of their GPU time, so the previous arrival was seen late`,
    );
  }
  console.log(formatTable(
    ["regime", "method", "kind", "steps", "scored", "outside", "MAPE", "p50", "p90", "bias"],
    report.groups.map((g) => [
      g.regime,
      g.method,
      g.kind,
      String(g.steps),
      String(g.scored),
      String(g.outside),
      pct(g.mapePct),
      pct(g.p50Pct),
      pct(g.p90Pct),
      pct(g.biasPct),
    ]),
  ));
  if (report.outsideReasons.length) {
    console.log("\noutside the library's domain (not scored):");
    for (const r of report.outsideReasons) console.log(`  ${r.count} x ${r.reason}`);
  }
  if (opts.json) writeFileSync(userPath(opts.json), JSON.stringify(report, null, 1));
  return 0;
});
