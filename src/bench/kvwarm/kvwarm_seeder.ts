/**
 * Real-KV seeding of decode points ("kvwarm"), as the sweep's decode seeder. It orders
 * the decode points by its plan (real-KV rungs first, batch desc, KV desc; fake ones
 * last), and at the boundary before each point:
 *
 * - before a rung's first point: sheds the previous rung's chains (finish path, fenced
 *   frees drained), then builds this rung's chains by stepping the engine through the
 *   step driver; every idle step runs one stage round (`StageSettlement.round`) from the
 *   driver's `onIdleStep` hook, and the stage settles in the round whose verdict says
 *   all done. A failed verdict (here or on a peer rank) sheds the chains, and the rung's
 *   points fall back to fake KV (`fake_fallback`, with the reason);
 * - before the first point that reads no chain: sheds the chains, drains the engine and
 *   resets the prefix cache (never while a free is still fenced).
 *
 * In the untimed admission window of a real-KV point it registers shadows of the parked
 * chains; other points get fake KV injection. `finish` releases everything, and the
 * artifact's kvwarm section comes from its recorder.
 *
 * ```ts
 * const seeder = new KvwarmSeeder({ engine, gate, capacity: () => capacity, samples: 3,
 *   settlement: new LocalStageSettlement(log), rank: 0, cow: true, late, log });
 * const planned = planPoints(decode, prefill, seeder, prefixSeeder, policy);
 * ```
 */
import type { Engine } from "../../engine/engine.ts";
import type { StepObservation } from "../../engine/step_observation.ts";
import type {
  BenchCapacity,
  BenchPoint,
  DecodeKvSeedRegime,
  DecodePoint,
  KvwarmSection,
} from "../artifact.ts";
import {
  type DecodeSeeder,
  type DecodeSeedOutcome,
  type DecodeSeedRequest,
  FakeKvSeeder,
} from "../decode_seeder.ts";
import { pointKey } from "../point.ts";
import { formatDuration } from "../progress.ts";
import type { StepDriver } from "../step_driver.ts";
import { type KvwarmGate, withGroupVerdict } from "./gate.ts";
import type { ChainContent } from "./chain_content.ts";
import { chainLengths, type KvwarmPlan, planKvwarm, type Rung } from "./plan.ts";
import { kvwarmOffSection, KvwarmRecorder } from "./section.ts";
import { registerShadows } from "./shadows.ts";
import { ChainStage } from "./stage.ts";
import { LocalStageSettlement, type StageSettlement } from "./stage_settlement.ts";

/** What the seeder needs. */
export interface KvwarmSeederOptions {
  /** The engine (prefix caching on). */
  readonly engine: Engine;
  /** An eligible gate (its chain content and dataset). */
  readonly gate: KvwarmGate;
  /** The envelope points are planned against (read when the points are ordered). */
  readonly capacity: () => BenchCapacity;
  /** Steady steps of a real-KV point (median-of-N). */
  readonly samples: number;
  /** Stage rounds: one rank locally, a group through the dp stage round. */
  readonly settlement: StageSettlement;
  /** This rank. */
  readonly rank: number;
  /** Shadow tails by copy-on-write (else zero-filled). */
  readonly cow: boolean;
  /** True once the soft timeout has passed. */
  readonly late: () => boolean;
  /** Log lines. */
  readonly log: (line: string) => void;
  /**
   * Tokens a step carries while a stage builds (default: the engine's budget); larger than
   * the budget, the engine takes it for the stage's steps only (Engine.setStepTokenBudget).
   */
  readonly stageTokens?: number;
  /** Seconds between a building stage's progress lines (default STAGE_PROGRESS_SECONDS). */
  readonly progressSeconds?: number;
}

/**
 * Seconds between a stage's progress lines while it builds: a deep rung's chains take minutes
 * (on the H200 the B64 rung of 64 chains of 8,188 tokens took 41.5 s), which would otherwise
 * pass without a line.
 */
export const STAGE_PROGRESS_SECONDS = 5;

/** A building stage's progress line: tokens held of the chains', seconds, ETA at the pace so far. */
export function stageProgressLine(batch: number, p: ReturnType<ChainStage["progress"]>): string {
  const left = p.total - p.tokens;
  const eta = p.computed > 0 && p.seconds > 0
    ? formatDuration(left / (p.computed / p.seconds))
    : "?";
  const pct = p.total > 0 ? Math.floor((100 * p.tokens) / p.total) : 100;
  return `kvwarm: stage B${batch}: ${p.tokens} of ${p.total} tokens (${pct}%) in ` +
    `${p.seconds.toFixed(1)} s, ETA ${eta}`;
}

/**
 * Tokens a step carries while a stage builds, by default (the bench's --kvwarm-step-tokens):
 * chains prefill untimed, and on the H200 the B32 rung of a medium grid built in 4.45 s in steps
 * of 8192 tokens against 5.31-5.38 s in steps of 2048 (session 27): more rows an expert fill
 * the expert GEMMs' 128-row work items better.
 */
export const KVWARM_STAGE_TOKENS = 8192;

/** kvwarm's decode seeder (see the module doc above). */
export class KvwarmSeeder implements DecodeSeeder {
  readonly #o: KvwarmSeederOptions;
  readonly #recorder: KvwarmRecorder;
  readonly #fake: FakeKvSeeder;
  readonly #content: ChainContent;
  #gate: KvwarmGate;
  #plan: KvwarmPlan | null = null;
  readonly #failed = new Map<Rung, string>();
  #driver: StepDriver | null = null;
  #active = false;
  #point: DecodePoint | null = null;
  /** The stage whose chains are parked and read by the current rung's points. */
  #stage: ChainStage | null = null;
  /** The stage being built, and the verdict that settles it. */
  #building: ChainStage | null = null;
  #verdict: { readonly ok: boolean; readonly seq: number } | null = null;
  #cacheDirty = false;

  /** A seeder for an eligible `options.gate`. */
  constructor(options: KvwarmSeederOptions) {
    const { gate } = options;
    if (!gate.eligible || !gate.content || !gate.dataset) {
      throw new Error(`kvwarm seeder needs an eligible gate, got ${gate.skipReason}`);
    }
    this.#o = options;
    this.#gate = gate;
    const content = gate.content, dataset = gate.dataset;
    this.#content = content;
    this.#recorder = new KvwarmRecorder({
      requested: gate.requested,
      shadowTail: options.cow ? "cow" : "zero_fill",
      settlement: options.settlement instanceof LocalStageSettlement ? "local" : "group",
      dataset,
      chains: () => content.info(gate.probeDepth, gate.probeSeconds),
    });
    this.#fake = new FakeKvSeeder({ requested: gate.requested, skipReason: "fake_fallback" });
  }

  /** True while real KV is on (false after a peer-ineligible verdict). */
  get enabled(): boolean {
    return this.#gate.eligible;
  }

  /** The plan (after {@link order}). */
  get plan(): KvwarmPlan | null {
    return this.#plan;
  }

  /**
   * Attention-DP, before planning (the capacity round's `KvwarmGroupGate`): this rank is
   * eligible but another is not (`reason`: `peer_ineligible`), so this one seeds fake KV
   * too and its section says why.
   */
  groupIneligible(reason: string): void {
    if (this.#plan) throw new Error("kvwarm: the group's eligibility comes before planning");
    this.#gate = withGroupVerdict(this.#gate, reason);
    this.#content.prepare([]);
    this.#o.log(`kvwarm: off (${reason}): decode points use fake KV (regime legacy)`);
  }

  /** Plans the rungs; real-KV points first (rung by rung), fake ones last. */
  order(points: readonly DecodePoint[]): DecodePoint[] {
    if (!this.enabled) return [...points];
    const plan = planKvwarm(points, this.#o.capacity(), this.#o.samples);
    this.#plan = plan;
    this.#content.prepare(chainLengths(plan.rungs));
    for (const f of plan.capacityFallbacks) this.#recorder.addCapacityFallback(f.batch, f.reason);
    const real = plan.rungs.reduce((s, r) => s + r.points.length, 0);
    this.#o.log(
      `kvwarm: ${plan.rungs.length} rung(s) (${
        plan.rungs.map((r) => `B${r.batch} depth ${r.depth}`).join(", ") || "none"
      }); ${real} decode point(s) on real KV, ${points.length - real} on fake KV; chain ` +
        `content: ${this.#content.tokensTokenized} tokens of ${this.#content.conversationsTokenized} ` +
        `conversations tokenized (${this.#content.prepareSeconds.toFixed(1)} s)`,
    );
    for (const f of plan.capacityFallbacks) this.#o.log(`kvwarm: rung B${f.batch}: ${f.reason}`);
    return [...plan.order];
  }

  /** `real_kv` on a rung whose stage has not failed; `fake_fallback` otherwise; `legacy` when off. */
  regime(point: DecodePoint): DecodeKvSeedRegime {
    if (!this.enabled) return "legacy";
    const rung = this.#planned().rungOf(point);
    return rung !== null && !this.#failed.has(rung) ? "real_kv" : "fake_fallback";
  }

  /** Stages or releases chains at the boundary before `point` (see the module doc above). */
  async beforePoint(point: BenchPoint, driver: StepDriver): Promise<void> {
    this.#point = point.kind === "decode" ? point : null;
    if (!this.enabled) return;
    this.#attach(driver);
    const rung = point.kind === "decode" ? this.#planned().rungOf(point) : null;
    const target = rung !== null && !this.#failed.has(rung) ? rung : null;
    if (this.#stage !== null && this.#stage.rung === target) return;
    if (this.#stage !== null) {
      this.#stage.shed(target?.batch ?? 0);
      this.#stage = null;
      await driver.drain();
    }
    // Reset only past the last rung: rungs after a failed one still extend its cached chains.
    if (target !== null) await this.#build(target, driver);
    else if (rung === null) this.#resetCache();
  }

  /** Shadows of the parked chains for a real-KV point; fake KV injection otherwise. */
  seed(engine: Engine, requests: readonly DecodeSeedRequest[]): DecodeSeedOutcome {
    const point = this.#point;
    if (!this.enabled || point === null) return this.#fake.seed(engine, requests);
    const key = pointKey(point);
    const stage = this.#stage;
    if (stage !== null && stage.ok && this.#planned().rungOf(point) === stage.rung) {
      const outcome = registerShadows(engine, (i) => stage.chainId(i), requests, {
        cow: this.#o.cow,
      });
      if (outcome.ok) this.#recorder.pointSeeded(key, point.batch_size, true);
      return outcome;
    }
    const outcome = this.#fake.seed(engine, requests);
    if (outcome.ok) {
      this.#recorder.pointSeeded(key, point.batch_size, false, this.#fallbackReason(point));
    }
    return outcome;
  }

  /** Sheds the chains, drains, resets the prefix cache, and drops the chain content. */
  async finish(driver: StepDriver): Promise<void> {
    if (this.#stage !== null) {
      this.#stage.shed(0);
      this.#stage = null;
      await driver.drain();
    }
    this.#resetCache();
    this.#active = false;
    this.#content.release();
  }

  /** The artifact's kvwarm section. */
  section(): KvwarmSection {
    if (!this.enabled) {
      return kvwarmOffSection(this.#gate.requested, this.#gate.skipReason ?? "off");
    }
    return this.#recorder.section();
  }

  #planned(): KvwarmPlan {
    if (!this.#plan) throw new Error("kvwarm: points were not ordered (planned) yet");
    return this.#plan;
  }

  #fallbackReason(point: DecodePoint): string {
    const plan = this.#planned();
    const rung = plan.rungOf(point);
    if (rung !== null) return `stage_failed: ${this.#failed.get(rung) ?? "no stage"}`;
    return plan.fallbacks.get(pointKey(point)) ?? "fake_fallback";
  }

  #attach(driver: StepDriver): void {
    if (this.#driver === driver) return;
    if (this.#driver !== null) throw new Error("kvwarm: one seeder serves one step driver");
    this.#driver = driver;
    this.#active = true;
    driver.addHooks({ onIdleStep: (seq, observation) => this.#round(seq, observation) });
  }

  /** The stage round of one idle step. */
  async #round(seq: number, observation: StepObservation | null): Promise<void> {
    if (!this.#active) return;
    const s = this.#building;
    if (s === null) {
      await this.#o.settlement.round(seq, null, "none", null);
      return;
    }
    s.check(observation, this.#o.late());
    const done = s.phase === "done";
    const v = await this.#o.settlement.round(seq, s.rung.batch, s.phase, done ? s.ok : null);
    if (v.allDone) {
      this.#verdict = { ok: v.ok === true, seq };
      this.#building = null;
    }
  }

  async #build(rung: Rung, driver: StepDriver): Promise<void> {
    if (driver.activePoint !== null) {
      throw new Error("kvwarm: a stage builds only between points (idle steps)");
    }
    const engine = this.#o.engine;
    const stepTokens = Math.max(
      engine.config.maxNumBatchedTokens,
      Math.min(this.#o.stageTokens ?? 0, engine.model.maxNumTokens ?? Infinity),
    );
    const stage = new ChainStage(rung, {
      engine,
      content: this.#content,
      rank: this.#o.rank,
      stepTokens,
    });
    this.#o.log(
      `kvwarm: stage B${rung.batch}: ${rung.batch} chains of ${rung.depth} tokens` +
        ` (steps of up to ${stepTokens} tokens)`,
    );
    if (this.#o.late()) stage.fail("soft_timeout: the soft timeout passed before the build");
    else stage.start();
    this.#cacheDirty = true;
    this.#building = stage;
    this.#verdict = null;
    // the stage's steps only: the budget is the config's again before any point's step
    engine.setStepTokenBudget(stepTokens);
    const every = (this.#o.progressSeconds ?? STAGE_PROGRESS_SECONDS) * 1000;
    let next = performance.now() + every;
    try {
      while (this.#verdict === null) {
        await driver.step();
        if (stage.phase === "building" && performance.now() >= next) {
          this.#o.log(stageProgressLine(rung.batch, stage.progress()));
          next = performance.now() + every;
        }
      }
    } finally {
      engine.setStepTokenBudget(null);
    }
    const verdict: { ok: boolean; seq: number } = this.#verdict;
    this.#verdict = null;
    if (!verdict.ok) stage.overrule("peer_stage_failed: another rank's build failed");
    const record = stage.record(verdict.seq);
    this.#recorder.addStage(record);
    this.#o.log(
      `kvwarm: stage B${rung.batch} ${record.ok ? "ok" : `failed (${record.reason})`}: ` +
        `${record.tokens_computed} tokens computed, ${record.tokens_reused} reused, ` +
        `${record.build_seconds.toFixed(2)} s`,
    );
    if (verdict.ok) {
      this.#stage = stage;
      return;
    }
    this.#failed.set(rung, record.reason ?? "failed");
    stage.shed(0);
    await driver.drain();
  }

  /** Forgets the prefix cache once the chains are gone (the fence drained first). */
  #resetCache(): void {
    if (!this.#cacheDirty) return;
    const u = this.#o.engine.kvUsage();
    if (u.pendingFree > 0 || !this.#o.engine.resetPrefixCache()) {
      throw new Error(
        `kvwarm: the prefix cache cannot be reset: ${u.inUse} blocks held, ` +
          `${u.pendingFree} frees still fenced`,
      );
    }
    this.#cacheDirty = false;
  }
}
