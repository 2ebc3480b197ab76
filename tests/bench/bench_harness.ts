/**
 * TEST HELPER (tests only): a benchmark run over the engine's CPU test double (fake KV
 * is fine: the double does not insist on written slots), writing its artifact to a
 * temporary folder.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Engine } from "../../src/engine/engine.ts";
import type { EngineConfig } from "../../src/engine/engine_config.ts";
import type { BenchArtifact, EngineInfo } from "../../src/bench/artifact.ts";
import { FULL_GRID } from "../../src/bench/grid.ts";
import { checkManifest } from "../../src/bench/manifest.ts";
import { type BenchOptions, type BenchPlugins, BenchRun } from "../../src/bench/run_bench.ts";
import { DEFAULT_MEDIAN_POLICY } from "../../src/bench/timed_samples.ts";
import { CpuTestModel, type CpuTestModelOptions } from "../engine/cpu_test_model.ts";

/** How the CPU double's engine is described. */
export const CPU_ENGINE_INFO: EngineInfo = {
  model: "cpu-test-double",
  architecture: "test",
  moe: false,
  num_layers: 0,
  hidden_size: 0,
  num_experts: 0,
  experts_per_token: 0,
  vocab_size: 50,
  dtype: "f32",
  num_blocks: 256,
  async_scheduling: true,
  adapter: null,
  runtime: "test",
  webfpm_version: "test",
};

/** A run over the double. */
export interface CpuBench {
  readonly run: BenchRun;
  readonly engine: Engine;
  readonly model: CpuTestModel;
  readonly out: string;
  readonly logs: string[];
}

/** Builds a run of `manifest` (a manifest object) over a fresh CPU double. */
export function cpuBench(
  manifest: unknown,
  options: Partial<BenchOptions> = {},
  model: Partial<CpuTestModelOptions> = {},
  config: Partial<EngineConfig> = {},
): CpuBench {
  const m = new CpuTestModel({
    numBlocks: 256,
    blockSize: 4,
    maxModelLen: 128,
    strictKv: false,
    ...model,
  });
  const engine = new Engine(m, {
    asyncScheduling: true,
    maxNumBatchedTokens: 64,
    maxNumSeqs: 8,
    watermark: 0,
    ...config,
  });
  const out = join(mkdtempSync(join(tmpdir(), "webfpm-bench-")), "artifact.json");
  const logs: string[] = [];
  const run = new BenchRun({
    runId: "test-run",
    out,
    mode: "agg",
    manifest: manifest === null
      ? null
      : { manifest: checkManifest(manifest, "m.json"), path: "m.json", sha256: "0".repeat(64) },
    grid: { preset: "full", limits: FULL_GRID },
    policy: DEFAULT_MEDIAN_POLICY,
    softTimeoutSeconds: null,
    content: "random",
    contentSeed: "0",
    kvwarm: "off",
    checkpointEvery: 0,
    rank: 0,
    dpSize: 1,
    warmup: { promptTokens: 16, steps: 5 },
    log: (l) => logs.push(l),
    ...options,
  });
  return { run, engine, model: m, out, logs };
}

/** Runs it; returns the returned artifact and the one on disk. */
export async function runCpuBench(
  b: CpuBench,
  plugins: BenchPlugins = {},
): Promise<{ artifact: BenchArtifact; file: BenchArtifact }> {
  const artifact = await b.run.run({ engine: b.engine, engineInfo: CPU_ENGINE_INFO }, plugins);
  return { artifact, file: readArtifact(b.out) };
}

/** The artifact on disk. */
export function readArtifact(path: string): BenchArtifact {
  return JSON.parse(readFileSync(path, "utf8"));
}
