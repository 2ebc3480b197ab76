/**
 * `deno task bench`: the forward-pass self-benchmark. Measures the engine's own step
 * latency over a grid of points (an explicit manifest, or the generated grid) and writes
 * one artifact (schema_version 2, see src/bench/artifact.ts). With no arguments it runs
 * the small generated grid on the tiny fixture tiny-qwen3-moe on whatever adapter exists.
 *
 * Exit codes: 0 complete or partial (soft timeout), 2 bad usage / manifest / points the
 * engine cannot hold / no adapter (a `failed` artifact is written where --out points,
 * never one that claims success), 1 a failure while running (a `failed` artifact keeps
 * the measured points), 130 Ctrl-C (a `partial` artifact keeps them).
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync, renameSync } from "node:fs";
import { basename, join } from "node:path";
import process from "node:process";
import { Engine } from "../engine/engine.ts";
import { describeGpu, type Gpu, openGpu } from "../gpu/device.ts";
import { isMoeModel } from "../model/config.ts";
import { defaultMaxNumTokens, GpuModel } from "../model/gpu_model.ts";
import type { BenchArtifact, ContentMode, EngineInfo } from "../bench/artifact.ts";
import { GRID_PRESETS } from "../bench/grid.ts";
import { ManifestError, parseManifest } from "../bench/manifest.ts";
import { modelPoolTokenizer } from "../bench/model_tokenizer.ts";
import { stepTrace } from "../bench/step_trace.ts";
import { CLOCK_WARMUP_SECONDS } from "../bench/warmup.ts";
import { KVWARM_STAGE_TOKENS } from "../bench/kvwarm/kvwarm_seeder.ts";
import { ArtifactWriter } from "../bench/artifact_writer.ts";
import { BenchRun, type ManifestInput } from "../bench/run_bench.ts";
import { loadTextPool, type TextPool, TextPoolError } from "../bench/text_pool.ts";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";
import { projectRoot } from "../util/project_root.ts";
import { InputError, runCli } from "./run_cli.ts";
import { parseArgs, UsageError } from "./args.ts";
import {
  DpError,
  DpRank,
  GpuAssignmentError,
  interruptNotice,
  mergeRankFiles,
  rankOutPath,
  stepRoundLine,
} from "../bench/dp/mod.ts";
import { launchRanks } from "./bench_launcher.ts";
import { checkedModel } from "./model_spec.ts";

const DEFAULT_FIXTURE = "tiny-qwen3-moe";
/**
 * The main job (no --model) is a demonstration that must finish in minutes on the software
 * driver: requests of up to 1024 tokens, 8 at a time, unless given. (With the fixture's own
 * limits, 4096 and 32, kvwarm prefills 131k tokens of chains: 9 minutes on lavapipe.)
 */
const DEFAULT_JOB_LIMITS = { maxModelLen: 1024, maxNumSeqs: 8 };

const SPEC = {
  model: {
    type: "string",
    help: `checkpoint folder or synthetic:NAME (default: the tiny fixture ${DEFAULT_FIXTURE})`,
  },
  points: { type: "string", help: "explicit points manifest (JSON, schema_version 1)" },
  mode: {
    type: "string",
    values: ["prefill", "decode", "agg"],
    default: "agg",
    help: "which points to measure",
  },
  out: { type: "string", help: "artifact path (default results/bench-<model>-<time>.json)" },
  timeout: {
    type: "number",
    min: 0,
    default: 0,
    help:
      "soft timeout in seconds from the sweep's start (its warm-up included), checked between points, in kvwarm's stage builds and in the clock warm-up; 0 for none",
  },
  kvwarm: {
    type: "string",
    values: ["auto", "on", "off"],
    default: "auto",
    help: "real-KV seeding of decode points (chains of real text, shadows of their KV); auto " +
      "is on for MoE models; a model or set-up that cannot (dense, no dataset or tokenizer) " +
      "runs fake KV and the artifact says why",
  },
  kvwarmCow: {
    type: "string",
    values: ["on", "off"],
    default: "on",
    help: "kvwarm shadow tails copy the chain's partial block (copy-on-write); off: zero-filled",
  },
  kvwarmStepTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "tokens a step carries while kvwarm builds its chains (untimed), never fewer than " +
      `--max-num-batched-tokens (default ${KVWARM_STAGE_TOKENS}; the model's step buffers are ` +
      "sized for it with kvwarm on or auto)",
  },
  prefillRealSeed: {
    type: "string",
    values: ["on", "off"],
    default: "off",
    help: "prefill KV-read points read a prefix computed by a real staged prefill " +
      "(real_prefix: stage, untimed warm shot, exact-hit check, one re-stage) instead of " +
      "injected blocks (fake_prefix)",
  },
  content: {
    type: "string",
    values: ["random", "text", "zeros"],
    default: "random",
    help: "prompt tokens: uniform random ids, real text (nlp-corpus), or zeros",
  },
  contentSeed: {
    type: "string",
    default: "0",
    help: "content seed S of content-v1:S:dp<rank>:<salt>",
  },
  repeats: {
    type: "number",
    integer: true,
    min: 1,
    default: 3,
    help: "samples of a median-of-N point (real-KV and giant points)",
  },
  giantKvThreshold: {
    type: "number",
    integer: true,
    min: 0,
    default: 1_000_000,
    help: "total KV tokens from which a point is measured median-of-N (0: every point)",
  },
  grid: {
    type: "string",
    values: ["full", "medium", "smoke"],
    help: "generated grid limits: full (the design's), medium (8 samples per axis: minutes on " +
      "a GPU) or smoke (two samples per axis); " +
      `default smoke for the default model, full otherwise`,
  },
  kvCacheGb: {
    type: "number",
    min: 0,
    help: "KV cache memory in GiB (default: the model's choice)",
  },
  maxNumSeqs: { type: "number", integer: true, min: 1, help: "requests in one step at most" },
  maxNumBatchedTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "tokens in one step at most",
  },
  maxModelLen: {
    type: "number",
    integer: true,
    min: 4,
    help: "prompt + output tokens of a request at most",
  },
  dtype: {
    type: "string",
    values: ["f16", "f32"],
    help: "weights and KV storage (default f16 where available)",
  },
  blockSize: { type: "number", integer: true, min: 1, default: 16, help: "tokens per KV block" },
  checkpointEvery: {
    type: "number",
    integer: true,
    min: 0,
    default: 5,
    help: "points between checkpoint writes of the artifact (0: none)",
  },
  warmupS: {
    type: "number",
    min: 0,
    help: "seconds the warm-up lasts at least: after the design's warm-up request, requests of " +
      "up to 2048 prompt tokens keep the GPU busy so its clocks are up for the first point " +
      `(default ${CLOCK_WARMUP_SECONDS} on a GPU, 0 on a CPU adapter)`,
  },
  stepTrace: {
    type: "string",
    help: "write every engine step (sums; schedule end, submit and output arrival ms; GPU ms; " +
      "the host CPU it ran on) " +
      "as a JSON line to FILE (with --dp, rank r to FILE with _dp<r> before its extension; a " +
      "measured step's step_id in the artifact names its line)",
  },
  dp: {
    type: "number",
    integer: true,
    min: 1,
    help: "attention-DP: start N rank processes on this host in lockstep (rank r writes " +
      "<out stem>_dp<r>.json; the merged view goes to <out stem>_merged.json)",
  },
  dpRank: {
    type: "number",
    integer: true,
    min: 0,
    help: "this rank, for ranks started by hand (with --dp-size, --dp-master); under Slurm " +
      "or MPI the environment says it",
  },
  dpSize: { type: "number", integer: true, min: 1, help: "ranks in the group (with --dp-rank)" },
  dpMaster: {
    type: "string",
    help: "HOST:PORT rank 0 listens on (default 127.0.0.1 and WEBFPM_DP_PORT or 29555)",
  },
  dpTimeout: {
    type: "number",
    min: 0.001,
    help: "seconds a rank waits for the others in any round before the group fails " +
      "(default 10; 600 on a CPU adapter, whose steps take seconds)",
  },
  dpConnectTimeout: {
    type: "number",
    min: 0.001,
    default: 600,
    help: "seconds ranks wait for every rank to start (model loading included)",
  },
  dpSpinMs: {
    type: "number",
    min: 0,
    help: "ms a wait for the other ranks polls before sleeping 1 ms between polls " +
      "(default 10 where the host has 2 cores per local rank, else 0)",
  },
  dpGpus: {
    type: "string",
    default: "auto",
    help: "GPU per rank: auto (one per local rank where the host has several), shared, " +
      "or PCI addresses 0000:18:00.0,0000:2a:00.0",
  },
} as const;

const SUMMARY = "Measures the engine's forward-pass latency over a grid of points and writes " +
  "the artifact (schema_version 2).";

function log(line: string): void {
  console.error(line);
}

function stamp(d: Date): string {
  return d.toISOString().replace(/[-:]/g, "").replace(/\..*$/, "").replace("T", "-");
}

function packageVersion(): string {
  try {
    return JSON.parse(readFileSync(join(projectRoot(), "package.json"), "utf8")).version;
  } catch {
    return "unknown";
  }
}

function runtime(): string {
  const v = process.versions as Record<string, string | undefined>;
  return v.deno ? `deno ${v.deno}` : `node ${v.node}`;
}

function readManifest(path: string): ManifestInput {
  if (!existsSync(path)) throw new InputError(`--points ${path}: no such file`);
  let text: string, sha256: string;
  try {
    const bytes = readFileSync(path);
    text = bytes.toString("utf8");
    sha256 = createHash("sha256").update(bytes).digest("hex");
  } catch (err) {
    // a folder or a file this user may not read
    throw new InputError(`--points ${path}: cannot read it: ${(err as Error).message}`);
  }
  return { manifest: parseManifest(text, path), path, sha256 };
}

// A rank that `--dp N` started ends when its launcher is gone, however the launcher died: the
// launcher never writes the rank's stdin, so its end means that (a SIGTERM, once the run can
// write its artifact; before that, exit 143).
let onLauncherGone: () => void = () => process.exit(143);
if (process.env.WEBFPM_DP_LAUNCHED === "1") {
  process.stdin.on("end", () => onLauncherGone());
  process.stdin.on("error", () => onLauncherGone());
  process.stdin.resume();
}

await runCli(async () => {
  const opts = parseArgs("bench", SUMMARY, SPEC, process.argv.slice(2));
  const blockSize = opts.blockSize;
  if ((blockSize & (blockSize - 1)) !== 0) {
    throw new UsageError(`--block-size: ${blockSize} is not a power of two`);
  }
  const defaultModel = opts.model === undefined;
  const modelSpec = defaultModel
    ? ensureFixture(DEFAULT_FIXTURE).dir
    : opts.model!.startsWith("synthetic:")
    ? opts.model!
    : userPath(opts.model!);
  const modelName = defaultModel
    ? DEFAULT_FIXTURE
    : modelSpec.startsWith("synthetic:")
    ? modelSpec.slice("synthetic:".length)
    : basename(modelSpec);
  const started = new Date();
  const runId = `${stamp(started)}-${randomBytes(3).toString("hex")}`;
  const requestedOut = userPath(opts.out ?? `results/bench-${modelName}-${stamp(started)}.json`);
  if (opts.dp !== undefined && opts.dp > 1) {
    return await launchRanks({
      argv: process.argv.slice(2),
      size: opts.dp,
      out: requestedOut,
      timeoutSeconds: opts.dpTimeout,
      log,
    });
  }
  const dp = openRank(opts);
  if (dp && opts.out === undefined) {
    await abortRank(dp, new Error(`rank ${dp.rank} was started without --out`));
    throw new UsageError(
      `rank ${dp.rank} of ${dp.size}: ranks started by hand (or by Slurm/MPI) need a common ` +
        `--out (rank r writes <stem>_dp<r>.json beside it)`,
    );
  }
  const out = dp ? dp.outPath(requestedOut) : requestedOut;
  try {
    new ArtifactWriter(out, 0).check();
  } catch (err) {
    await abortRank(dp, err);
    throw new UsageError(`--out: ${(err as Error).message}`);
  }
  if (dp && existsSync(out)) {
    // a rank's file from an earlier run must not stand in for this run's in the merge, should
    // this rank die before its first write: kept aside, not lost
    renameSync(out, `${out}.prev`);
    log(`dp: moved the earlier run's ${basename(out)} to ${basename(out)}.prev`);
  }
  let trace: ReturnType<typeof stepTrace> | null = null;
  if (opts.stepTrace !== undefined) {
    const path = userPath(opts.stepTrace);
    try {
      trace = stepTrace(dp ? dp.outPath(path) : path, log);
    } catch (err) {
      await abortRank(dp, err);
      throw new UsageError(`--step-trace ${path}: ${(err as Error).message}`);
    }
  }
  const preset = opts.grid ?? (defaultModel ? "smoke" : "full");

  let manifest: ManifestInput | null = null;
  // bad input found before any work: a failed artifact names it (exit 2)
  let inputError: unknown = null;
  try {
    manifest = opts.points === undefined ? null : readManifest(userPath(opts.points));
  } catch (err) {
    inputError = err;
  }
  if (inputError === null && !defaultModel) {
    try {
      checkedModel(modelSpec); // the config and the checkpoint's tensors, before the GPU opens
    } catch (err) {
      inputError = err;
    }
  }
  // kvwarm's stage steps (untimed): the run's seeder takes them, the model's step holds them
  const stageTokens = opts.kvwarmStepTokens ?? KVWARM_STAGE_TOKENS;
  const run = new BenchRun({
    runId,
    out,
    mode: opts.mode as "prefill" | "decode" | "agg",
    manifest,
    grid: { preset, limits: GRID_PRESETS[preset] },
    policy: { repeats: opts.repeats, giantKvThreshold: opts.giantKvThreshold },
    softTimeoutSeconds: opts.timeout > 0 ? opts.timeout : null,
    content: opts.content as ContentMode,
    contentSeed: opts.contentSeed,
    kvwarm: opts.kvwarm as "on" | "off" | "auto",
    kvwarmCow: opts.kvwarmCow === "on",
    kvwarmStepTokens: stageTokens,
    prefillRealSeed: opts.prefillRealSeed === "on",
    checkpointEvery: opts.checkpointEvery,
    warmupSeconds: opts.warmupS,
    rank: dp?.rank ?? 0,
    dpSize: dp?.size ?? 1,
    log,
  });
  if (dp) {
    run.builder.attentionDp = () => dp.section();
    dp.onPeerInterrupt = (why) => run.interrupt(why);
  }
  if (inputError !== null) {
    run.fail(inputError, "input");
    log(`bench: wrote ${out} (status failed)`);
    await abortRank(dp, inputError);
    throw inputError instanceof ManifestError ? new InputError(inputError.message) : inputError;
  }
  // the signal that interrupted this rank, if one did
  let ownSignal: "SIGINT" | "SIGTERM" | null = null;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    const handler = () => {
      ownSignal ??= signal;
      const a = run.interrupt(signal);
      log(
        `\nbench: ${signal}: wrote ${out} (status ${a.status}, ${a.results.length} points measured)`,
      );
      void abortRank(dp, interruptNotice(signal)).finally(() => process.exit(exitCodeOf(signal)));
    };
    process.on(signal, handler);
    if (signal === "SIGTERM") onLauncherGone = handler;
  }

  let gpu: Gpu | null = null;
  try {
    const t0 = performance.now();
    gpu = await openGpu();
    log(describeGpu(gpu).split("\n")[0]);
    await dp?.open({ cpu: gpu.adapter.type === "cpu" }).catch((err) => {
      throw err instanceof DpError && err.code === "config" ? new InputError(err.message) : err;
    });
    // the measured steps' budget; with kvwarm, the model's step also holds its chains' steps
    const budget = opts.maxNumBatchedTokens ?? defaultMaxNumTokens(gpu);
    const model = await GpuModel.load(gpu, modelSpec, {
      dtype: opts.dtype as "f16" | "f32" | undefined,
      blockSize,
      kvCacheBytes: opts.kvCacheGb === undefined ? undefined : opts.kvCacheGb * 2 ** 30,
      maxNumTokens: opts.kvwarm === "off" ? budget : Math.max(budget, stageTokens),
      maxNumSeqs: opts.maxNumSeqs ?? (defaultModel ? DEFAULT_JOB_LIMITS.maxNumSeqs : undefined),
      maxModelLen: opts.maxModelLen ??
        (defaultModel ? DEFAULT_JOB_LIMITS.maxModelLen : undefined),
    }, (m) => log(`model: ${m}`));
    // A CPU adapter (lavapipe) runs the step inside queue.submit, so an overlapped next step
    // would hide the previous output's arrival: schedule synchronously there.
    const engine = new Engine(model, {
      asyncScheduling: gpu.adapter.type !== "cpu",
      enablePrefixCaching: true,
      enableChunkedPrefill: true,
      maxNumBatchedTokens: budget,
      maxNumSeqs: Math.min(model.maxNumSeqs, model.maxLogitRows),
    });
    let textPool: TextPool | null = null;
    if (opts.content === "text") {
      const t1 = performance.now();
      textPool = loadTextPool(modelPoolTokenizer(modelSpec), {
        minTokens: Math.max(2 * engine.config.maxModelLen, 131072),
        vocabSize: model.vocabSize,
      });
      log(
        `text pool: ${textPool.info.tokens} tokens from ${textPool.info.bodies_used} ` +
          `${textPool.info.package} bodies in ${((performance.now() - t1) / 1000).toFixed(1)} s`,
      );
    }
    run.builder.setupSeconds = (performance.now() - t0) / 1000;
    const cfg = model.config;
    const info: EngineInfo = {
      model: defaultModel ? `${DEFAULT_FIXTURE} (${modelSpec})` : modelSpec,
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
      adapter: {
        description: gpu.adapter.description,
        vendor: gpu.adapter.vendor,
        architecture: gpu.adapter.architecture,
        type: gpu.adapter.type,
        backend: gpu.adapter.backend,
        driver: gpu.adapter.driver,
        timestamps: gpu.timestamps,
        f16: gpu.f16,
      },
      runtime: runtime(),
      webfpm_version: packageVersion(),
    };
    log(
      `engine: ${model.numBlocks} KV blocks of ${model.blockSize}, max_num_seqs ` +
        `${engine.config.maxNumSeqs}, max_batched_tokens ${engine.config.maxNumBatchedTokens}, ` +
        `max_model_len ${engine.config.maxModelLen}; content ${opts.content}; ` +
        `points: ${manifest ? manifest.path : `generated (${preset})`}`,
    );
    await dp?.connect();
    const artifact = await run.run(
      { engine, engineInfo: info, textPool, tokenizer: () => modelPoolTokenizer(modelSpec) },
      { ...dp?.plugins(), hooks: trace ? [trace.hooks] : undefined },
    ).finally(() => trace?.close());
    // Ctrl-C here (the signal handler is aborting the group) or on another rank (the group
    // has failed): no "bye" round, which could reach the other ranks before this rank's
    // interrupt notice and read there as a lockstep error, failing their runs
    const interrupted = artifact.stop_reason === "interrupted";
    if (interrupted) await abortRank(dp, interruptNotice(ownSignal ?? "SIGINT"));
    else await dp?.finish();
    printSummary(artifact);
    log(`bench: wrote ${out} (status ${artifact.status})`);
    if (interrupted) return exitCodeOf(ownSignal ?? "SIGINT");
    if (dp) finishRank(dp, artifact, requestedOut);
    return 0;
  } catch (err) {
    if (err instanceof ManifestError || err instanceof TextPoolError) {
      run.fail(err, "input");
      log(`bench: wrote ${out} (status failed)`);
      await abortRank(dp, err);
      throw new InputError(err.message);
    }
    if (!run.final) run.fail(err, "runtime");
    log(`bench: wrote ${out} (status ${run.final?.status ?? "failed"})`);
    await abortRank(dp, err);
    if (run.final?.stop_reason === "interrupted") return exitCodeOf("SIGINT"); // another rank's Ctrl-C
    throw err;
  } finally {
    gpu?.destroy();
  }
});

/** This process's attention-DP rank (null: one rank); bad rank or GPU input is a usage error. */
function openRank(opts: {
  dpTimeout?: number;
  dpConnectTimeout: number;
  dpGpus: string;
  dpSpinMs?: number;
}): DpRank | null {
  try {
    return DpRank.create({
      argv: process.argv.slice(2),
      env: process.env,
      timeoutSeconds: opts.dpTimeout,
      connectTimeoutSeconds: opts.dpConnectTimeout,
      gpus: opts.dpGpus,
      spinMs: opts.dpSpinMs,
      log,
    });
  } catch (err) {
    if (err instanceof DpError || err instanceof GpuAssignmentError) {
      throw new UsageError(err.message);
    }
    throw err;
  }
}

/** The shell's exit code for a run stopped by `signal`: 130 (SIGINT), 143 (SIGTERM). */
function exitCodeOf(signal: "SIGINT" | "SIGTERM"): number {
  return signal === "SIGINT" ? 130 : 143;
}

/** Tells the group this rank failed, and gives the notice a moment to leave before exit. */
async function abortRank(dp: DpRank | null, err: unknown): Promise<void> {
  if (!dp) return;
  await dp.abort(err);
  await new Promise((resolve) => setTimeout(resolve, 200));
}

/** After the group's last round: the barrier's cost; rank 0 merges when every file is here. */
function finishRank(dp: DpRank, artifact: BenchArtifact, requestedOut: string): void {
  const section = artifact.attention_dp;
  if (section) console.log(stepRoundLine(dp.rank, section.step_round, section.idle_barrier));
  if (dp.rank !== 0 || process.env.WEBFPM_DP_LAUNCHED === "1") return;
  const paths = [...Array(dp.size).keys()].map((r) => rankOutPath(requestedOut, r));
  if (paths.some((p) => !existsSync(p))) {
    log(
      `dp: the other ranks' artifacts are not beside ${requestedOut}: merge them with ` +
        `deno task bench-merge --out ${requestedOut} --dp ${dp.size}`,
    );
    return;
  }
  const merged = mergeRankFiles(requestedOut, dp.size);
  writeJsonAtomic(dp.mergedPath(requestedOut), merged);
  log(`bench: wrote ${dp.mergedPath(requestedOut)} (status ${merged.status})`);
}

function printSummary(a: BenchArtifact): void {
  const ms = (s: number | null) => (s === null ? "-" : (s * 1000).toFixed(2));
  const rows = a.results.map((r) => {
    const f = r.fpms[0];
    return [
      String(r.benchmark_id),
      r.point_key,
      r.kv_seed_regime,
      `${f.benchmark_measurement.estimate.median_of}`,
      ms(f.wall_time),
      ms(f.gpu_time),
    ];
  });
  const shown = rows.length > 40 ? [...rows.slice(0, 20), ...rows.slice(-20)] : rows;
  console.log(formatTable(["id", "point", "kv_seed_regime", "n", "wall ms", "GPU ms"], shown));
  if (rows.length > shown.length) console.log(`(${rows.length - shown.length} rows not shown)`);
  for (const s of a.skipped_points) {
    console.log(`skipped #${s.benchmark_id} ${s.point_key}: ${s.reason}`);
  }
  const t = a.timing;
  console.log(
    `${a.coverage.points_measured}/${a.coverage.points_planned} points measured, ` +
      `${a.coverage.points_skipped} skipped, status ${a.status}; ${t.elapsed.toFixed(1)} s, ` +
      `${t.points_per_minute.toFixed(1)} points/min, ` +
      `${(100 * t.outside_measured_share).toFixed(1)}% of wall time outside measured steps`,
  );
}
