/**
 * TEST HELPER (tests only): kvwarm over the engine's CPU test double. The double reads
 * every token's "KV" back through its block table (a wrong share, copy or fence changes
 * its output, and with strict KV reading a slot no step wrote throws), so real-KV
 * behaviour is checked exactly. Chains are real: the pinned nlp-corpus dataset and the
 * real Qwen3 tokenizer (loaded once per process).
 */
import type { EngineConfig } from "../../../src/engine/engine_config.ts";
import { Engine } from "../../../src/engine/engine.ts";
import type { BenchCapacity, EngineInfo } from "../../../src/bench/artifact.ts";
import { benchCapacity } from "../../../src/bench/capacity.ts";
import { type KvwarmGate, probeKvwarmGate } from "../../../src/bench/kvwarm/gate.ts";
import type { BenchOptions } from "../../../src/bench/run_bench.ts";
import { loadTextBodies } from "../../../src/bench/text_pool.ts";
import { ModelTokenizer, qwen3TokenizerJsonPath } from "../../../src/model/tokenizer.ts";
import { CpuTestModel, type CpuTestModelOptions } from "../../engine/cpu_test_model.ts";
import { CPU_ENGINE_INFO, type CpuBench, cpuBench } from "../bench_harness.ts";

/** A vocabulary the Qwen3 tokenizer's ids fit in. */
export const VOCAB = 151936;

let tokenizer: ModelTokenizer | null = null;
let corpus: { bodies: string[]; version: string } | null = null;

/** The real Qwen3 tokenizer (the one `synthetic:qwen3-*` models use). */
export function qwen3Tokenizer(): ModelTokenizer {
  tokenizer ??= ModelTokenizer.fromFile(qwen3TokenizerJsonPath());
  return tokenizer;
}

/** The pinned dataset's bodies (verified once). */
export function corpusBodies(): { bodies: string[]; version: string } {
  corpus ??= loadTextBodies();
  return corpus;
}

/** The double's engine described as an MoE model. */
export const MOE_ENGINE_INFO: EngineInfo = { ...CPU_ENGINE_INFO, moe: true, vocab_size: VOCAB };

/** An engine over a fresh double with a vocabulary the tokenizer fits in. */
export function cpuEngine(
  model: Partial<CpuTestModelOptions> = {},
  config: Partial<EngineConfig> = {},
): { engine: Engine; model: CpuTestModel } {
  const m = new CpuTestModel({
    numBlocks: 128,
    blockSize: 4,
    maxModelLen: 128,
    vocabSize: VOCAB,
    ...model,
  });
  const engine = new Engine(m, {
    asyncScheduling: true,
    maxNumBatchedTokens: 64,
    maxNumSeqs: 8,
    watermark: 0,
    ...config,
  });
  return { engine, model: m };
}

/** An eligible gate for `engine` (real dataset and tokenizer). */
export function eligibleGate(engine: Engine, contentSeed = "0", rank = 0): KvwarmGate {
  const gate = probeKvwarmGate({
    requested: "auto",
    moe: true,
    prefixCaching: engine.config.enablePrefixCaching,
    maxModelLen: engine.config.maxModelLen,
    vocabSize: engine.model.vocabSize,
    contentSeed,
    rank,
    tokenizer: qwen3Tokenizer,
    bodies: corpusBodies,
  });
  if (!gate.eligible) throw new Error(`test set-up: the gate refused (${gate.message})`);
  return gate;
}

/** The engine's capacity. */
export function capacityOf(engine: Engine): BenchCapacity {
  return benchCapacity(engine);
}

/** A benchmark run with kvwarm on over the double (see bench_harness.ts). */
export function kvwarmBench(
  manifest: unknown,
  options: Partial<BenchOptions> = {},
  model: Partial<CpuTestModelOptions> = {},
  config: Partial<EngineConfig> = {},
): CpuBench {
  return cpuBench(manifest, { kvwarm: "auto", ...options }, {
    vocabSize: VOCAB,
    numBlocks: 256,
    ...model,
  }, config);
}

/** Runs it as an MoE model with the real tokenizer. */
export function runKvwarmBench(b: CpuBench, info: EngineInfo = MOE_ENGINE_INFO) {
  return b.run.run({ engine: b.engine, engineInfo: info, tokenizer: qwen3Tokenizer });
}
