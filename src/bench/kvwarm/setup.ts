/**
 * How a benchmark run gets its seeders: the kvwarm gate is probed first (before the
 * envelope is negotiated or any point planned), then decode points get kvwarm's seeder
 * when the gate passes and fake KV (regime `legacy`, with the skip reason) otherwise,
 * and prefill KV-read points get real prefix seeding when it is asked for. The run's
 * artifact section merges the decode seeder's kvwarm section with the prefix seeder's
 * counters.
 *
 * ```ts
 * const seeders = setupKvwarm({ requested: "auto", moe: true, engine, ... });
 * seeders.decodeSeeder.order(points);
 * ```
 */
import type { Engine } from "../../engine/engine.ts";
import type { BenchCapacity, KvwarmSection } from "../artifact.ts";
import { type DecodeSeeder, FakeKvSeeder } from "../decode_seeder.ts";
import { FakePrefixSeeder, type PrefixSeeder } from "../prefix_seeder.ts";
import { type PoolTokenizer, TextPoolError } from "../text_pool.ts";
import { type KvwarmGate, probeKvwarmGate } from "./gate.ts";
import { KvwarmSeeder } from "./kvwarm_seeder.ts";
import { RealPrefixSeeder } from "./real_prefix_seeder.ts";
import { type KvwarmRequest, prefillRealSeedIdle } from "./section.ts";
import { LocalStageSettlement, type StageSettlement } from "./stage_settlement.ts";

/** What the run knows when it sets its seeders up. */
export interface KvwarmSetupOptions {
  /** `--kvwarm`. */
  readonly requested: KvwarmRequest;
  /** Shadow tails by copy-on-write (`--kvwarm-cow`, default on), else zero-filled. */
  readonly cow: boolean;
  /** Real prefix seeding of prefill KV-read points (`--prefill-real-seed`). */
  readonly prefillRealSeed: boolean;
  /** The engine. */
  readonly engine: Engine;
  /** Whether the model has MoE layers. */
  readonly moe: boolean;
  /** The content seed. */
  readonly contentSeed: string;
  /** This rank. */
  readonly rank: number;
  /** Steady steps of a real-KV point. */
  readonly samples: number;
  /** The (negotiated) envelope, read when points are planned. */
  readonly capacity: () => BenchCapacity;
  /** True once the soft timeout has passed. */
  readonly late: () => boolean;
  /** Log lines. */
  readonly log: (line: string) => void;
  /** The model's tokenizer (none: `tokenizer_unavailable:none_given`). */
  readonly tokenizer?: () => PoolTokenizer;
  /** Stage rounds (default: one rank, local). */
  readonly settlement?: StageSettlement;
  /** Tokens a step carries while a stage builds (KvwarmSeederOptions.stageTokens). */
  readonly stageTokens?: number;
}

/** The seeders and what the artifact says of them. */
export interface KvwarmSetup {
  /** The gate's verdict. */
  readonly gate: KvwarmGate;
  /** Decode KV. */
  readonly decodeSeeder: DecodeSeeder;
  /** Prefill prefixes. */
  readonly prefixSeeder: PrefixSeeder;
  /** The artifact's kvwarm section (decode seeder's, with the prefix seeder's counters). */
  readonly section: () => KvwarmSection;
  /** measurement_protocol.preparation.prefill_kv_read. */
  readonly prefillPreparation: string;
}

/** measurement_protocol.preparation.decode with real KV on (`kvwarm`) or off. */
export function decodePreparation(kvwarm: boolean): string {
  return kvwarm
    ? "kvwarm_shadow_untimed (real_kv), fake_kv_injection_untimed (fake_fallback)"
    : "fake_kv_injection_untimed";
}

/** What no timed sample holds beyond the protocol's own list, with real KV on or off. */
export function kvwarmUnobserved(kvwarm: boolean): readonly string[] {
  return kvwarm ? ["kvwarm_stage"] : [];
}

/** Probes the gate and builds the seeders (see the module doc above). */
export function setupKvwarm(o: KvwarmSetupOptions): KvwarmSetup {
  const gate = probeKvwarmGate({
    requested: o.requested,
    moe: o.moe,
    prefixCaching: o.engine.config.enablePrefixCaching,
    maxModelLen: o.engine.config.maxModelLen,
    vocabSize: o.engine.model.vocabSize,
    contentSeed: o.contentSeed,
    rank: o.rank,
    tokenizer: o.tokenizer ?? (() => {
      throw new TextPoolError("tokenizer_unavailable:none_given", "the run has no tokenizer");
    }),
  });
  if (gate.eligible) {
    o.log(`kvwarm: on (${gate.message}; probe ${gate.probeSeconds.toFixed(1)} s)`);
  } else if (o.requested !== "off") {
    o.log(
      `kvwarm: ${o.requested}, but decode points use fake KV (regime legacy): ` +
        `${gate.skipReason}: ${gate.message}`,
    );
  }
  const decodeSeeder: DecodeSeeder = gate.eligible
    ? new KvwarmSeeder({
      engine: o.engine,
      gate,
      capacity: o.capacity,
      samples: o.samples,
      settlement: o.settlement ?? new LocalStageSettlement(o.log),
      rank: o.rank,
      cow: o.cow,
      late: o.late,
      log: o.log,
      stageTokens: o.stageTokens,
    })
    : new FakeKvSeeder({ requested: o.requested, skipReason: gate.skipReason ?? "off" });
  const real = o.prefillRealSeed ? new RealPrefixSeeder(o.log) : null;
  return {
    gate,
    decodeSeeder,
    prefixSeeder: real ?? new FakePrefixSeeder(),
    section: () => ({
      ...decodeSeeder.section(),
      prefill_real_seed: real?.stats() ?? prefillRealSeedIdle(false),
    }),
    prefillPreparation: real ? "real_prefix_staged_warm_shot_exact_hit" : "fake_prefix_exact_hit",
  };
}
