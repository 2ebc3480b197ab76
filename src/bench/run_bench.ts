/**
 * One rank's benchmark run from start to artifact: it plans the points against the
 * engine (an explicit manifest, every point checked first, or the generated grid),
 * agrees the grid with the other ranks, runs the sweep, and writes the artifact:
 * checkpoints every few points, then `complete` or `partial` (soft timeout). An
 * interrupt writes a `partial` artifact at once and a failure a `failed` one, both
 * keeping every measured point.
 *
 * ```ts
 * const run = new BenchRun({ ...DEFAULT_BENCH_OPTIONS, out: "results/bench.json", runId });
 * process.on("SIGINT", () => { run.interrupt("SIGINT"); process.exit(130); });
 * const artifact = await run.run({ engine, engineInfo });
 * ```
 */
import type { Engine } from "../engine/engine.ts";
import type {
  BenchArtifact,
  BenchCapacity,
  BenchMode,
  ContentMode,
  DecodePoint,
  EngineInfo,
  GridLimits,
  PrefillPoint,
  RunError,
} from "./artifact.ts";
import { ArtifactBuilder } from "./artifact_builder.ts";
import { ArtifactWriter } from "./artifact_writer.ts";
import { benchCapacity } from "./capacity.ts";
import type { DecodeSeeder } from "./decode_seeder.ts";
import { pointProblems } from "./feasibility.ts";
import { BoundaryGc } from "./gc_policy.ts";
import { generateDecodeGrid, generatePrefillGrid } from "./grid.ts";
import { type Manifest, ManifestError } from "./manifest.ts";
import { gridDigest, planPoints } from "./plan.ts";
import { pointKey } from "./point.ts";
import { LocalSynchronizer, type PointSynchronizer } from "./point_synchronizer.ts";
import type { PrefixSeeder } from "./prefix_seeder.ts";
import { decodePreparation, kvwarmUnobserved, setupKvwarm } from "./kvwarm/setup.ts";
import type { StageSettlement } from "./kvwarm/stage_settlement.ts";
import { type PromptContent, randomContent, textContent, zerosContent } from "./prompt_content.ts";
import { SaltScheme } from "./salts.ts";
import { StepDriver, type StepHooks } from "./step_driver.ts";
import { runSweep } from "./sweep.ts";
import type { PoolTokenizer, TextPool } from "./text_pool.ts";
import { type MedianPolicy, timedSamples } from "./timed_samples.ts";
import { CLOCK_WARMUP_SECONDS, warmupShape } from "./warmup.ts";
import { KVWARM_STAGE_TOKENS } from "./kvwarm/kvwarm_seeder.ts";

/** An explicit manifest and where it came from. */
export interface ManifestInput {
  /** The parsed points. */
  readonly manifest: Manifest;
  /** Its path. */
  readonly path: string;
  /** sha256 of its bytes. */
  readonly sha256: string;
}

/** What a run is asked to do. */
export interface BenchOptions {
  /** Unique id of the run. */
  readonly runId: string;
  /** Where the artifact goes. */
  readonly out: string;
  /** prefill | decode | agg. */
  readonly mode: BenchMode;
  /** Explicit points, or null for the generated grid. */
  readonly manifest: ManifestInput | null;
  /** The generated grid's preset name and sample limits. */
  readonly grid: { readonly preset: string; readonly limits: GridLimits };
  /** Median-of-N policy. */
  readonly policy: MedianPolicy;
  /** Soft timeout, s (null: none). */
  readonly softTimeoutSeconds: number | null;
  /** Content mode asked for. */
  readonly content: ContentMode;
  /** The content seed S. */
  readonly contentSeed: string;
  /** `--kvwarm` (`auto`: on for MoE models). */
  readonly kvwarm: "on" | "off" | "auto";
  /** kvwarm shadow tails by copy-on-write (default true), else zero-filled. */
  readonly kvwarmCow?: boolean;
  /**
   * Tokens a step carries while a kvwarm stage builds (default KVWARM_STAGE_TOKENS, never
   * fewer than the step budget nor more than the model's step holds).
   */
  readonly kvwarmStepTokens?: number;
  /** Real prefix seeding of prefill KV-read points (default false: fake prefix). */
  readonly prefillRealSeed?: boolean;
  /** Points between checkpoints. */
  readonly checkpointEvery: number;
  /** This rank (0) and the number of ranks (1) until attention-DP runs. */
  readonly rank: number;
  /** Ranks. */
  readonly dpSize: number;
  /** Warm-up shape (default 256 tokens x 5 steps). */
  readonly warmup?: { readonly promptTokens: number; readonly steps: number };
  /**
   * Seconds the warm-up lasts at least, its clock warm-up (warmup.ts; default
   * CLOCK_WARMUP_SECONDS on a GPU adapter, 0 on a CPU adapter).
   */
  readonly warmupSeconds?: number;
  /** Log lines. */
  readonly log: (line: string) => void;
}

/** What the run measures. */
export interface RunInputs {
  /** The engine (asynchronous scheduling, prefix caching on). */
  readonly engine: Engine;
  /** How it is described in the artifact. */
  readonly engineInfo: EngineInfo;
  /** The real-text pool (content mode text). */
  readonly textPool?: TextPool | null;
  /** The model's tokenizer, for kvwarm's chains (none: kvwarm is tokenizer_unavailable). */
  readonly tokenizer?: () => PoolTokenizer;
}

/** Everything a caller may plug in: another rank group, step hooks, real-KV seeders. */
export interface BenchPlugins {
  /** Per-point agreement (default: one rank). */
  readonly sync?: PointSynchronizer;
  /** Hooks after every step / every idle step. */
  readonly hooks?: readonly StepHooks[];
  /** Decode KV source (default fake KV injection). */
  readonly decodeSeeder?: DecodeSeeder;
  /** Prefill prefix source (default fake prefix). */
  readonly prefixSeeder?: PrefixSeeder;
  /** Garbage collection (default globalThis.gc at boundaries). */
  readonly gc?: BoundaryGc;
  /** kvwarm stage rounds (default: one rank, settled locally). */
  readonly stageSettlement?: StageSettlement;
  /**
   * Attention-DP: agrees the envelope the grid is planned against (min over ranks) and
   * kvwarm eligibility (all ranks) before any point is planned; returns the envelope.
   */
  readonly negotiate?: (own: BenchCapacity, decodeSeeder: DecodeSeeder) => Promise<BenchCapacity>;
}

/** One rank's run (see the module doc above). */
export class BenchRun {
  /** The artifact under construction. */
  readonly builder: ArtifactBuilder;
  /** Its file. */
  readonly writer: ArtifactWriter;
  #final: BenchArtifact | null = null;
  #currentPoint: number | null = null;

  /** A run of `options`; nothing runs until {@link run}. */
  constructor(readonly options: BenchOptions) {
    this.builder = new ArtifactBuilder({
      runId: options.runId,
      rank: options.rank,
      dpSize: options.dpSize,
      mode: options.mode,
      contentSeed: options.contentSeed,
      limits: {
        soft_timeout_seconds: options.softTimeoutSeconds,
        repeats: options.policy.repeats,
        giant_kv_threshold: options.policy.giantKvThreshold,
        checkpoint_every_points: options.checkpointEvery,
      },
    });
    this.writer = new ArtifactWriter(options.out, options.checkpointEvery);
    this.builder.pointsSource = options.manifest
      ? { kind: "manifest", path: options.manifest.path, sha256: options.manifest.sha256 }
      : { kind: "generated", preset: options.grid.preset, limits: options.grid.limits };
  }

  /** The final artifact once written (null before). */
  get final(): BenchArtifact | null {
    return this.#final;
  }

  /**
   * Plans and runs every point on `engine`, writes the artifact and returns it. Explicit
   * points the engine cannot hold throw a {@link ManifestError} (after writing a failed
   * artifact) before anything runs; any other failure writes a failed artifact and
   * rethrows.
   */
  async run(inputs: RunInputs, plugins: BenchPlugins = {}): Promise<BenchArtifact> {
    const o = this.options;
    const { engine, engineInfo } = inputs;
    const b = this.builder;
    try {
      this.writer.check();
      b.engine = engineInfo;
      let capacity = benchCapacity(engine);
      b.capacity = capacity;
      const sync = plugins.sync ?? new LocalSynchronizer();
      const gc = plugins.gc ?? new BoundaryGc();
      b.gc = () => gc.record();
      if (!gc.exposed) {
        o.log(
          "note: globalThis.gc is not exposed (run with --v8-flags=--expose-gc); no collections",
        );
      }
      const content = this.#content(engine.model.vocabSize, inputs.textPool ?? null);
      b.syntheticPrompts = {
        mode: content.mode,
        vocab_size: engine.model.vocabSize,
        zeros_fallback: content.zerosFallback,
        fallback_reason: content.fallbackReason,
        text: content.mode === "text" ? inputs.textPool!.info : null,
      };
      if (content.zerosFallback) o.log(`note: prompts are zeros: ${content.fallbackReason}`);
      // kvwarm's gate (its content probe included) runs before any capacity decision
      const kvwarm = setupKvwarm({
        requested: plugins.decodeSeeder ? "off" : o.kvwarm,
        cow: o.kvwarmCow ?? true,
        prefillRealSeed: o.prefillRealSeed ?? false,
        engine,
        moe: engineInfo.moe,
        contentSeed: o.contentSeed,
        rank: o.rank,
        samples: o.policy.repeats,
        capacity: () => capacity,
        late: () =>
          o.softTimeoutSeconds !== null && b.sweepStartedMs !== null &&
          performance.now() > b.sweepStartedMs + o.softTimeoutSeconds * 1000,
        log: o.log,
        tokenizer: inputs.tokenizer,
        settlement: plugins.stageSettlement,
        stageTokens: o.kvwarmStepTokens ?? KVWARM_STAGE_TOKENS,
      });
      const decodeSeeder = plugins.decodeSeeder ?? kvwarm.decodeSeeder;
      const prefixSeeder = plugins.prefixSeeder ?? kvwarm.prefixSeeder;
      b.kvwarm = plugins.decodeSeeder ? () => decodeSeeder.section() : kvwarm.section;
      b.prefillPreparation = kvwarm.prefillPreparation;
      if (plugins.negotiate) {
        b.capacity = capacity = await plugins.negotiate(capacity, decodeSeeder);
      }
      // real KV as the group agreed it (a peer may have turned it off)
      const kvwarmOn = decodeSeeder.section().enabled;
      b.decodePreparation = decodePreparation(kvwarmOn);
      b.unobservedExtra = kvwarmUnobserved(kvwarmOn);
      // the warm-up fitted to the envelope the group agreed (refused here when nothing fits)
      const warmup = warmupShape(
        capacity,
        o.warmup,
        o.warmupSeconds ??
          (engineInfo.adapter === null || engineInfo.adapter.type === "cpu"
            ? 0
            : CLOCK_WARMUP_SECONDS),
      );
      const { decode, prefill } = this.#points(capacity, kvwarmOn);
      const planned = planPoints(decode, prefill, decodeSeeder, prefixSeeder, o.policy);
      if (o.manifest) this.#checkExplicit(planned.map((p) => p.point), capacity, o.policy);
      b.planned = planned;
      b.gridDigest = await sync.agreeGridDigest(gridDigest(planned));
      o.log(
        `grid: ${planned.length} points (${decode.length} decode, ${prefill.length} prefill), ` +
          `digest ${b.gridDigest.slice(0, 12)}`,
      );
      const driver = new StepDriver(engine, plugins.hooks ?? []);
      if (sync.size > 1) driver.addHooks({ afterStep: (seq) => sync.barrier(seq) });
      const end = await runSweep({
        driver,
        content,
        salts: new SaltScheme(o.runId, o.rank),
        decodeSeeder,
        prefixSeeder,
        sync,
        gc,
        builder: b,
        softTimeoutSeconds: o.softTimeoutSeconds,
        log: o.log,
        warmup,
        interrupted: () => this.#final !== null,
        onPointStart: (id) => (this.#currentPoint = id),
        onPointDone: (n) => {
          this.#currentPoint = null;
          // after an interrupt the final artifact is on disk: a checkpoint must not replace it
          if (this.#final === null) {
            this.writer.maybeCheckpoint(n, () => b.build("partial", "checkpoint", null));
          }
        },
      }, planned);
      if (this.#final) return this.#final; // interrupted: that artifact stands
      return this.#finish(b.build(end === "complete" ? "complete" : "partial", end, null));
    } catch (err) {
      try {
        this.fail(err, err instanceof ManifestError ? "input" : "runtime");
      } catch (writeErr) {
        // the artifact's path itself failed: say so, and let the run's own error stand
        o.log(`bench: no artifact written: ${(writeErr as Error).message}`);
      }
      throw err;
    }
  }

  /**
   * Writes a `partial` artifact now (Ctrl-C) and stops the sweep at the next point
   * boundary; returns it. A no-op after the final write.
   */
  interrupt(signal: string): BenchArtifact {
    if (this.#final) return this.#final;
    const error: RunError = {
      kind: "interrupted",
      message: `interrupted by ${signal}` +
        (this.#currentPoint === null ? "" : ` during benchmark_id=${this.#currentPoint}`),
      benchmark_id: this.#currentPoint,
      stack: null,
    };
    return this.#finish(this.builder.build("partial", "interrupted", error));
  }

  /** Writes a `failed` artifact for `err`; returns it. A no-op after the final write. */
  fail(err: unknown, kind: "input" | "runtime"): BenchArtifact {
    if (this.#final) return this.#final;
    const e = err instanceof Error ? err : new Error(String(err));
    const error: RunError = {
      kind,
      message: e.message,
      benchmark_id: this.#currentPoint,
      stack: kind === "runtime" ? e.stack ?? null : null,
    };
    return this.#finish(
      this.builder.build("failed", kind === "input" ? "input_error" : "error", error),
    );
  }

  #finish(artifact: BenchArtifact): BenchArtifact {
    this.writer.write(artifact);
    this.#final = artifact;
    return artifact;
  }

  #content(vocabSize: number, textPool: TextPool | null): PromptContent {
    const o = this.options;
    if (o.content === "zeros") return zerosContent();
    if (o.content === "text") {
      if (!textPool) throw new Error("content mode text needs a text pool");
      return textContent(textPool.tokens, o.contentSeed, o.rank);
    }
    return randomContent(vocabSize, o.contentSeed, o.rank);
  }

  #points(capacity: ReturnType<typeof benchCapacity>, kvwarm: boolean): {
    decode: DecodePoint[];
    prefill: PrefillPoint[];
  } {
    const o = this.options;
    const wantDecode = o.mode !== "prefill", wantPrefill = o.mode !== "decode";
    if (o.manifest) {
      const m = o.manifest.manifest;
      const decode = wantDecode ? [...m.decode] : [];
      const prefill = wantPrefill ? [...m.prefill] : [];
      if (decode.length + prefill.length === 0) {
        throw new ManifestError(o.manifest.path, [
          `the manifest has no ${o.mode} points (--mode ${o.mode})`,
        ]);
      }
      return { decode, prefill };
    }
    const d = wantDecode
      ? generateDecodeGrid(capacity, o.grid.limits, o.policy, kvwarm ? "real_kv" : "legacy")
      : { points: [], infeasible: 0 };
    const p = wantPrefill
      ? generatePrefillGrid(capacity, o.grid.limits, o.policy)
      : { points: [], infeasible: 0 };
    this.builder.generatedInfeasible = d.infeasible + p.infeasible;
    return { decode: d.points, prefill: p.points };
  }

  /** Every explicit point must fit the engine; the error names each point and field. */
  #checkExplicit(
    points: readonly (DecodePoint | PrefillPoint)[],
    capacity: ReturnType<typeof benchCapacity>,
    policy: MedianPolicy,
  ): void {
    const m = this.options.manifest!.manifest;
    const problems: string[] = [];
    for (const point of points) {
      const list = point.kind === "decode" ? m.decode : m.prefill;
      const index = list.findIndex((q) => pointKey(q) === pointKey(point));
      const regime = point.kind === "decode" ? "legacy" : "fake_prefix";
      for (const pr of pointProblems(point, capacity, timedSamples(point, regime, policy))) {
        problems.push(`${point.kind}[${index}].${pr.field} (${pointKey(point)}): ${pr.message}`);
      }
    }
    if (problems.length > 0) {
      throw new ManifestError(
        `${this.options.manifest!.path}: points the engine cannot hold`,
        problems,
      );
    }
  }
}
