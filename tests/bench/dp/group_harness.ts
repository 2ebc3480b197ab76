/**
 * TEST HELPER (tests only): a group of benchmark ranks in one process, each with its own
 * engine over the CPU test double and its own BenchRun, talking over real ZeroMQ TCP
 * sockets on 127.0.0.1 through the same DpRank the CLI uses.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Engine } from "../../../src/engine/engine.ts";
import type { BenchArtifact } from "../../../src/bench/artifact.ts";
import { checkManifest } from "../../../src/bench/manifest.ts";
import {
  type BenchOptions,
  type BenchPlugins,
  BenchRun,
  type RunInputs,
} from "../../../src/bench/run_bench.ts";
import { DEFAULT_MEDIAN_POLICY } from "../../../src/bench/timed_samples.ts";
import { SMOKE_GRID } from "../../../src/bench/grid.ts";
import { DpRank } from "../../../src/bench/dp/dp_rank.ts";
import { rankOutPath } from "../../../src/bench/dp/rank_out_path.ts";
import { CpuTestModel } from "../../engine/cpu_test_model.ts";
import { freePort } from "../../dp/group.ts";
import { CPU_ENGINE_INFO, readArtifact } from "../bench_harness.ts";

/** One rank's set-up. */
export interface RankSetup {
  /** Its model (default a CPU double of 256 blocks of 4 tokens). */
  readonly model?: CpuTestModel;
  /** Extra plugins (a decode seeder, hooks). */
  readonly plugins?: Partial<BenchPlugins>;
  /** Options that differ from the harness's (e.g. a soft timeout). */
  readonly options?: Partial<BenchOptions>;
  /** Run inputs beside the engine (default: a dense CPU double's info, no tokenizer). */
  readonly inputs?: Partial<Omit<RunInputs, "engine">>;
  /** Plugins made from the rank's own DpRank plugins (e.g. a wrapped stage settlement). */
  readonly wrap?: (own: ReturnType<DpRank["plugins"]>) => Partial<BenchPlugins>;
}

/** What a group run gave. */
export interface GroupRun {
  /** The `--out` every rank wrote beside. */
  readonly out: string;
  /** The ranks. */
  readonly ranks: readonly DpRank[];
  /** Each rank's outcome: its returned artifact, or its error. */
  readonly outcomes: readonly PromiseSettledResult<BenchArtifact>[];
  /** Each rank's artifact on disk. */
  readonly files: readonly BenchArtifact[];
  /** Each rank's log lines. */
  readonly logs: readonly string[][];
}

/** A CPU double with `numBlocks` blocks of 4 tokens (model length 128). */
export function cpuModel(numBlocks = 256, vocabSize?: number): CpuTestModel {
  return new CpuTestModel({
    numBlocks,
    blockSize: 4,
    maxModelLen: 128,
    vocabSize,
    strictKv: false,
  });
}

/** Creates `size` ranks on a free port (rank 0 first); they still have to connect. */
export async function createRanks(
  size: number,
  timeoutSeconds = 5,
): Promise<{ ranks: DpRank[]; logs: string[][] }> {
  const port = await freePort();
  const logs: string[][] = [];
  const ranks: DpRank[] = [];
  for (let rank = 0; rank < size; rank++) {
    const lines: string[] = [];
    logs.push(lines);
    ranks.push(
      (DpRank.create({
        argv: [
          "--dp-rank",
          String(rank),
          "--dp-size",
          String(size),
          "--dp-master",
          `127.0.0.1:${port}`,
        ],
        env: {},
        timeoutSeconds,
        connectTimeoutSeconds: 30,
        gpus: "shared",
        log: (l) => lines.push(l),
        applyGpuEnv: false,
      }))!,
    );
  }
  return { ranks, logs };
}

/**
 * Runs `manifest` (null: the smoke grid) on `size` ranks, rank r set up by `setup(r)`;
 * each rank finishes the group after its run, or aborts it on failure.
 */
export async function runGroup(
  size: number,
  manifest: unknown,
  setup: (rank: number) => RankSetup = () => ({}),
  timeoutSeconds = 5,
): Promise<GroupRun> {
  const out = join(mkdtempSync(join(tmpdir(), "webfpm-dp-group-")), "group.json");
  const { ranks, logs } = await createRanks(size, timeoutSeconds);
  const runs = ranks.map((dp, rank) => {
    const s = setup(rank);
    const engine = new Engine(s.model ?? cpuModel(), {
      asyncScheduling: true,
      maxNumBatchedTokens: 64,
      maxNumSeqs: 8,
      watermark: 0,
    });
    const run = new BenchRun({
      runId: `group-${rank}`,
      out: rankOutPath(out, rank),
      mode: "agg",
      manifest: manifest === null
        ? null
        : { manifest: checkManifest(manifest, "m.json"), path: "m.json", sha256: "0".repeat(64) },
      grid: { preset: "smoke", limits: SMOKE_GRID },
      policy: DEFAULT_MEDIAN_POLICY,
      softTimeoutSeconds: null,
      content: "random",
      contentSeed: "0",
      kvwarm: "off",
      checkpointEvery: 1,
      rank,
      dpSize: size,
      warmup: { promptTokens: 16, steps: 5 },
      log: (l) => logs[rank].push(l),
      ...s.options,
    });
    run.builder.attentionDp = () => dp.section();
    return { run, engine, plugins: s.plugins ?? {}, inputs: s.inputs ?? {}, wrap: s.wrap };
  });
  await Promise.all(ranks.map((dp) => dp.connect()));
  const outcomes = await Promise.allSettled(
    runs.map(async ({ run, engine, plugins, inputs, wrap }, r) => {
      const dp = ranks[r];
      try {
        const own = dp.plugins();
        const artifact = await run.run(
          { engine, engineInfo: CPU_ENGINE_INFO, ...inputs },
          { ...own, ...plugins, ...(wrap?.(own) ?? {}) },
        );
        await dp.finish();
        return artifact;
      } catch (err) {
        await dp.abort(err);
        throw err;
      }
    }),
  );
  return {
    out,
    ranks,
    outcomes,
    files: ranks.map((_, rank) => readArtifact(rankOutPath(out, rank))),
    logs,
  };
}
