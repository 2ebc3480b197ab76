/**
 * `deno task report ARTIFACT... --out FILE.html [--profile PROFILE.json,...] [--title T]`:
 * one self-contained HTML page (works offline) from benchmark artifacts: decode latency
 * surface per regime, prefill latency against tokens, fake vs real KV, median-of-N
 * spread, skipped points, shader timing breakdown (recorded kernel timings, or `deno task
 * profile --json` files given with --profile), run provenance.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import process from "node:process";
import { renderReport, type ReportKernelTimings } from "../report/html_report.ts";
import type { KernelTimingSummary } from "../report/kernel_timings.ts";
import { readArtifact } from "../report/latency_library.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { InputError, runCli } from "./run_cli.ts";

const SPEC = {
  out: { type: "string", help: "HTML file to write" },
  profile: { type: "list", help: "deno task profile --json files to add to the shader breakdown" },
  title: { type: "string", help: "page title" },
} as const;

await runCli(() => {
  const opts = parseArgs(
    "report",
    "Writes one self-contained HTML report from benchmark artifacts (positional arguments).",
    SPEC,
    process.argv.slice(2),
    "ARTIFACT.json...",
  );
  if (opts._.length === 0) throw new UsageError("name at least one artifact");
  if (!opts.out) throw new UsageError("--out is required");
  const artifacts = opts._.map((p) => {
    try {
      return { name: basename(p), artifact: readArtifact(userPath(p)) };
    } catch (err) {
      throw new InputError((err as Error).message);
    }
  });
  const kernelTimings: ReportKernelTimings[] = (opts.profile ?? []).map((p) => {
    let obj: {
      shape?: { batch: number; ctx: number; prefill_tokens: number | null };
      summary?: KernelTimingSummary;
    };
    try {
      obj = JSON.parse(readFileSync(userPath(p), "utf8"));
    } catch (err) {
      throw new InputError(`--profile ${p}: ${(err as Error).message}`);
    }
    if (!obj.summary || !Array.isArray(obj.summary.rows)) {
      throw new InputError(`--profile ${p}: not a deno task profile --json file (no summary.rows)`);
    }
    const s = obj.shape;
    const title = s
      ? s.prefill_tokens === null
        ? `profile decode B=${s.batch} ctx=${s.ctx}`
        : `profile prefill B=${s.batch} T=${s.prefill_tokens} ctx=${s.ctx}`
      : basename(p);
    return { title, summary: obj.summary };
  });
  const html = renderReport(artifacts, { kernelTimings, title: opts.title });
  writeFileSync(userPath(opts.out), html);
  console.log(
    `wrote ${opts.out} (${
      (html.length / 1024).toFixed(0)
    } KiB) from ${artifacts.length} artifact(s)`,
  );
  return 0;
});
