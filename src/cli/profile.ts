/**
 * `deno task profile --model M --batch B --ctx C [--prefill-tokens T] [--steps N]
 * [--trace FILE.json] [--json FILE] [--bandwidth-gbps G]`: runs steps of one shape with
 * every dispatch timed and prints one row per kernel label: calls, GPU µs, share of the
 * step, bytes moved, achieved GB/s, % of the measured read-bandwidth roof, TFLOP/s.
 * `--trace` writes the last measured step as Chrome trace-event JSON (open it in Perfetto).
 */
import process from "node:process";
import { describeGpu, openGpu } from "../gpu/device.ts";
import { Engine } from "../engine/engine.ts";
import { rooflineBytes } from "../model/step_cost.ts";
import { chromeTrace } from "../report/chrome_trace.ts";
import { summarizeSpans } from "../report/kernel_timings.ts";
import { writeFileAtomic, writeJsonAtomic } from "../util/atomic_file.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { loadModel, MODEL_OPTIONS } from "./model_options.ts";
import { profileSteps } from "./profile_steps.ts";
import { readRoof, roofLine } from "./bandwidth_roof.ts";
import { InputError, runCli } from "./run_cli.ts";

const SPEC = {
  ...MODEL_OPTIONS,
  batch: { type: "number", integer: true, min: 1, default: 1, help: "requests in the step" },
  ctx: {
    type: "number",
    integer: true,
    min: 0,
    default: 1024,
    help: "KV tokens per request before the step",
  },
  prefillTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "profile a prefill step of T new tokens over the batch (default: a decode step)",
  },
  steps: {
    type: "number",
    integer: true,
    min: 1,
    default: 3,
    help: "measured steps (after one warm-up)",
  },
  trace: { type: "string", help: "write the last step as Chrome trace-event JSON (Perfetto)" },
  json: { type: "string", help: "write the summary as JSON" },
  bandwidthGbps: {
    type: "number",
    min: 1,
    help: "read-bandwidth roof in GB/s (default: measured with the read_bandwidth kernel)",
  },
} as const;

await runCli(async () => {
  const opts = parseArgs(
    "profile",
    "Times every kernel of a step of one shape against the bandwidth roof.",
    SPEC,
    process.argv.slice(2),
  );
  if (opts.prefillTokens === undefined && opts.ctx < 1) {
    throw new UsageError("a decode profile needs --ctx >= 1 (--ctx 0 only with --prefill-tokens)");
  }
  const gpu = await openGpu();
  if (!gpu.timestamps) {
    throw new InputError("this adapter has no timestamp queries: kernels cannot be timed");
  }
  const log = (line: string) => console.error(line);
  console.log(describeGpu(gpu).split("\n")[0]);
  // the perf tasks' roof (the best of the read_bandwidth forms), so "% roof" means one thing
  const roof = await readRoof(gpu, opts.bandwidthGbps);
  log(roofLine(roof));
  const bandwidth = roof ? roof.bytesPerSecond / 1e9 : null;
  const model = await loadModel(gpu, opts, log, { profile: true });
  const T = opts.prefillTokens;
  const budget = Math.max(T ?? 0, Math.min(2048, model.maxNumTokens));
  if (budget > model.maxNumTokens) {
    throw new InputError(
      `--prefill-tokens ${T} exceeds the model's ${model.maxNumTokens} tokens a step (--max-num-tokens)`,
    );
  }
  const engine = new Engine(model, {
    maxNumBatchedTokens: budget,
    maxNumSeqs: model.maxNumSeqs,
  });
  // a shape the engine cannot take is an InputError (profile_steps.ts)
  const steps = await profileSteps(engine, model, {
    batch: opts.batch,
    ctx: opts.ctx,
    prefillTokens: T,
    steps: opts.steps,
  });
  const summary = summarizeSpans(steps, { bandwidthGbps: bandwidth });
  const title = T === undefined
    ? `decode batch ${opts.batch} ctx ${opts.ctx}`
    : `prefill batch ${opts.batch} tokens ${T} ctx ${opts.ctx}`;
  const fmt = (x: number | null, digits = 1) => (x === null ? "-" : x.toFixed(digits));
  console.log(`\n${title}: ${summary.steps} steps, ${summary.step_us.toFixed(1)} µs GPU a step`);
  console.log(formatTable(
    ["kernel", "shader", "calls", "total µs", "share %", "MB", "GB/s", "% roof", "TFLOP/s"],
    summary.rows.map((r) => [
      r.label,
      r.kernels.join(","),
      String(r.calls),
      r.us.toFixed(1),
      (100 * r.share).toFixed(1),
      fmt(r.bytes === null ? null : r.bytes / 1e6, 2),
      fmt(r.gb_per_s),
      fmt(r.roof_pct),
      fmt(r.tflop_per_s, 3),
    ]),
  ));
  const last = steps[steps.length - 1];
  const cost = model.stepCost(last.shape);
  const roofBytes = rooflineBytes(cost);
  const lastUs = last.spans.reduce((s, x) => s + x.us, 0);
  console.log(
    `\nstep: ${(cost.totalBytes / 1e6).toFixed(2)} MB moved, roofline bytes ` +
      `${(roofBytes / 1e6).toFixed(2)} MB -> ${fmt(roofBytes / (lastUs * 1e-6) / 1e9)} GB/s` +
      (bandwidth
        ? `, ${(100 * roofBytes / (lastUs * 1e-6) / 1e9 / bandwidth).toFixed(1)}% of the roof`
        : "") +
      ` (roof ${fmt(bandwidth)} GB/s)`,
  );
  if (opts.trace) {
    const extra = new Map(
      [...cost.byLabel].map((
        [label, c],
      ) => [label, { bytes_per_call: c.bytes / c.calls, flops_per_call: c.flops / c.calls }]),
    );
    writeFileAtomic(
      userPath(opts.trace),
      JSON.stringify(chromeTrace(last.spans, { title, extra })),
    );
    console.log(`wrote ${opts.trace} (open it in Perfetto)`);
  }
  if (opts.json) {
    writeJsonAtomic(userPath(opts.json), {
      shape: { batch: opts.batch, ctx: opts.ctx, prefill_tokens: T ?? null },
      summary,
    });
  }
  model.destroy();
  gpu.destroy();
  return 0;
});
