/**
 * kvwarm's evidence: the same decode points measured on fake KV and on real KV, side by
 * side, with the router's expert counts per timed step under each regime, and the decode
 * sweep's wall time with and without kvwarm. One benchmark run per process (so no run
 * inherits another's process state), on a freshly loaded model (fresh KV buffers):
 *
 * - `--regime fake`: kvwarm off, every point median-of-3 (the samples of a real-KV point);
 * - `--regime real`: kvwarm on (regime real_kv where the plan allows);
 * - `--regime baseline`: kvwarm off with the default policy (the sweep without kvwarm);
 * - `--compare`: prints the tables from the saved runs (runs of one regime are averaged).
 *
 * The router's top-k ids are read back per step (GpuModel.routingObserver) in every run
 * alike, unless `--routing off`. Files go to `--out-dir`: `<name>.json` (the artifact) and
 * `<name>.extra.json` (wall time, expert counts per point).
 *
 * Usage: `deno run -A --v8-flags=--expose-gc scripts/kvwarm_evidence.ts --regime fake
 *   [--name fake1] [--model SPEC] [--batches 1,4,8] [--ctx 64,256,512] [--out-dir DIR]`,
 *   then `... --compare`.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { parseArgs, type Parsed, UsageError } from "../src/cli/args.ts";
import { runCli } from "../src/cli/run_cli.ts";
import { Engine } from "../src/engine/engine.ts";
import { openGpu } from "../src/gpu/device.ts";
import { isMoeModel } from "../src/model/config.ts";
import { GpuModel, type RoutingCapture } from "../src/model/gpu_model.ts";
import type { BenchArtifact, BenchResult, EngineInfo } from "../src/bench/artifact.ts";
import { FULL_GRID } from "../src/bench/grid.ts";
import { checkManifest } from "../src/bench/manifest.ts";
import { modelTokenizer } from "../src/bench/model_tokenizer.ts";
import { BenchRun } from "../src/bench/run_bench.ts";
import { formatTable } from "../src/util/table.ts";
import { ensureFixture } from "./fixtures.ts";
import { userPath } from "../src/util/user_path.ts";

const SPEC = {
  regime: { type: "string", values: ["fake", "real", "baseline"], help: "the run to do" },
  name: { type: "string", help: "file name of the run (default: the regime)" },
  compare: { type: "boolean", default: false, help: "print the tables of the saved runs" },
  model: { type: "string", help: "checkpoint folder or synthetic:NAME (default tiny-qwen3-moe)" },
  batches: { type: "list", default: ["1", "4", "8"], help: "decode batch sizes" },
  ctx: { type: "list", default: ["64", "256", "512"], help: "KV tokens per request" },
  routing: { type: "string", values: ["on", "off"], default: "on", help: "read router ids back" },
  kvCacheGb: { type: "number", min: 0, help: "KV cache GiB (default: the model's choice)" },
  maxModelLen: { type: "number", integer: true, min: 8, help: "max model length" },
  outDir: { type: "string", default: "tmp/kvwarm-evidence", help: "where the runs go" },
} as const;
type Options = Parsed<typeof SPEC>;

/** What a run saves beside its artifact. */
interface Extra {
  readonly regime: string;
  readonly wall_seconds: number;
  /** Per point key: mean over timed steps and MoE layers of [distinct experts, busiest expert's rows]. */
  readonly experts: Record<string, [number, number] | null>;
}

/** Mean over the point's timed steps and MoE layers: distinct experts hit, the busiest one's rows. */
function experts(r: BenchResult, routing: Map<number, RoutingCapture>): [number, number] | null {
  const steps = r.fpms[0].benchmark_measurement.samples.map((s) => routing.get(s.step_id));
  if (steps.length === 0 || steps.some((s) => s === undefined)) return null;
  let distinct = 0, busiest = 0, n = 0;
  for (const c of steps as RoutingCapture[]) {
    for (const layer of c.layers) {
      const load = new Array(c.numExperts).fill(0);
      for (const e of layer.topkIds) load[e]++;
      distinct += load.filter((x) => x > 0).length;
      busiest += Math.max(...load);
      n++;
    }
  }
  return [distinct / n, busiest / n];
}

async function runOne(
  opts: Options,
  outDir: string,
  regime: string,
  name: string,
): Promise<void> {
  const spec = opts.model ?? ensureFixture("tiny-qwen3-moe").dir;
  const points = opts.batches.flatMap((b) =>
    opts.ctx.map((c) => ({ batch_size: Number(b), total_kv_read_tokens: Number(b) * Number(c) }))
  );
  const manifest = checkManifest({ schema_version: 1, decode: points }, "evidence.json");
  const gpu = await openGpu();
  try {
    const model = await GpuModel.load(gpu, spec, {
      kvCacheBytes: opts.kvCacheGb === undefined ? undefined : opts.kvCacheGb * 2 ** 30,
      maxModelLen: opts.maxModelLen,
    });
    const routing = new Map<number, RoutingCapture>();
    if (opts.routing === "on") model.routingObserver = (c) => routing.set(c.step, c);
    const engine = new Engine(model, {
      asyncScheduling: gpu.adapter.type !== "cpu",
      enablePrefixCaching: true,
      enableChunkedPrefill: true,
      maxNumBatchedTokens: model.maxNumTokens,
      maxNumSeqs: Math.min(model.maxNumSeqs, model.maxLogitRows),
    });
    const cfg = model.config;
    const info: EngineInfo = {
      model: spec,
      architecture: cfg.architecture,
      moe: isMoeModel(cfg),
      num_layers: cfg.numLayers,
      hidden_size: cfg.hiddenSize,
      num_experts: cfg.numExperts,
      experts_per_token: cfg.numExpertsPerTok,
      vocab_size: model.vocabSize,
      dtype: model.weights.dtype,
      num_blocks: model.numBlocks,
      async_scheduling: engine.config.asyncScheduling,
      adapter: null,
      runtime: "kvwarm_evidence",
      webfpm_version: "evidence",
    };
    const bench = new BenchRun({
      runId: `evidence-${name}`,
      out: join(outDir, `${name}.json`),
      mode: "decode",
      manifest: { manifest, path: "evidence.json", sha256: "0".repeat(64) },
      grid: { preset: "full", limits: FULL_GRID },
      policy: { repeats: 3, giantKvThreshold: regime === "fake" ? 1 : 1_000_000 },
      softTimeoutSeconds: null,
      content: "random",
      contentSeed: "0",
      kvwarm: regime === "real" ? "on" : "off",
      checkpointEvery: 0,
      rank: 0,
      dpSize: 1,
      log: (l) => console.error(`[${name}] ${l}`),
    });
    const t0 = performance.now();
    const artifact = await bench.run({
      engine,
      engineInfo: info,
      tokenizer: () => modelTokenizer(spec),
    });
    const extra: Extra = {
      regime,
      wall_seconds: (performance.now() - t0) / 1000,
      experts: Object.fromEntries(artifact.results.map((r) => [r.point_key, experts(r, routing)])),
    };
    writeFileSync(join(outDir, `${name}.extra.json`), JSON.stringify(extra, null, 1));
    console.error(`[${name}] ${artifact.status}, ${extra.wall_seconds.toFixed(1)} s`);
  } finally {
    gpu.destroy();
  }
}

function compare(outDir: string): void {
  const runs = readdirSync(outDir).filter((f) => f.endsWith(".extra.json")).map((f) => {
    const name = f.slice(0, -".extra.json".length);
    const artifact: BenchArtifact = JSON.parse(
      readFileSync(join(outDir, `${name}.json`), "utf8"),
    );
    const extra: Extra = JSON.parse(readFileSync(join(outDir, f), "utf8"));
    return { name, artifact, extra };
  });
  const of = (regime: string) => runs.filter((r) => r.extra.regime === regime);
  const fakes = of("fake"), reals = of("real"), [baseline] = of("baseline");
  if (fakes.length === 0 || reals.length === 0) {
    throw new UsageError("--compare needs a fake and a real run");
  }
  const real = reals[0];
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const pct = (a: number, b: number) => `${(100 * (a - b) / b).toFixed(1)}%`;
  const ms = (s: number) => (s * 1000).toFixed(2);
  const rows = real.artifact.results.map((r) => {
    const f = fakes.map((x) => x.artifact.results.find((y) => y.point_key === r.point_key)!);
    const g = reals.map((x) => x.artifact.results.find((y) => y.point_key === r.point_key)!);
    const fw = mean(f.map((x) => x.fpms[0].wall_time));
    const fg = mean(f.map((x) => x.fpms[0].gpu_time ?? NaN));
    const rw = mean(g.map((x) => x.fpms[0].wall_time));
    const rg = mean(g.map((x) => x.fpms[0].gpu_time ?? NaN));
    const fe = fakes[0].extra.experts[r.point_key], re = real.extra.experts[r.point_key];
    return [
      r.point_key,
      r.kv_seed_regime,
      f.map((x) => ms(x.fpms[0].wall_time)).join(" / "),
      g.map((x) => ms(x.fpms[0].wall_time)).join(" / "),
      pct(rw, fw),
      `${ms(fg)} -> ${ms(rg)} (${pct(rg, fg)})`,
      fe && re ? `${fe[0].toFixed(2)} -> ${re[0].toFixed(2)}` : "-",
      fe && re ? `${fe[1].toFixed(2)} -> ${re[1].toFixed(2)}` : "-",
    ];
  });
  console.log(
    formatTable([
      "point",
      "regime",
      `fake wall ms (${fakes.map((x) => x.name).join(" / ")})`,
      `real wall ms (${reals.map((x) => x.name).join(" / ")})`,
      "real vs fake (means)",
      "GPU ms fake -> real (means)",
      "experts/step fake -> real",
      "busiest expert rows fake -> real",
    ], rows),
  );
  const k = real.artifact.kvwarm;
  for (const s of k.stages) {
    console.log(
      `stage B${s.batch} depth ${s.depth}: ${s.tokens_computed} tokens computed, ` +
        `${s.tokens_reused} reused, ${s.build_seconds.toFixed(2)} s, ${s.steps} steps` +
        (s.ok ? "" : `, failed: ${s.reason}`),
    );
  }
  if (baseline) {
    console.log(
      `decode sweep wall: without kvwarm ${baseline.extra.wall_seconds.toFixed(1)} s, with ` +
        `kvwarm ${real.extra.wall_seconds.toFixed(1)} s (x${
          (real.extra.wall_seconds / baseline.extra.wall_seconds).toFixed(2)
        }), of which chain builds ${
          k.stages.reduce((a, s) => a + s.build_seconds, 0).toFixed(1)
        } s`,
    );
  }
}

await runCli(async () => {
  const opts = parseArgs(
    "kvwarm-evidence",
    "fake vs real KV on the same decode points",
    SPEC,
    process.argv.slice(2),
  );
  // where the runs go, resolved against the folder the user ran from (also through the bundle)
  const outDir = userPath(opts.outDir);
  mkdirSync(outDir, { recursive: true });
  if (opts.compare) compare(outDir);
  else if (opts.regime) await runOne(opts, outDir, opts.regime, opts.name ?? opts.regime);
  else throw new UsageError("give --regime fake|real|baseline or --compare");
  return 0;
});
