/**
 * The artifact's `kvwarm` section: what the gate decided, the chains' content, every
 * stage (batch, depth, build seconds, tokens computed and reused, outcome), the points
 * seeded on real KV, the points that fell back to fake KV and why, the rungs that could
 * not fit, and the real prefix seeding of prefill points. {@link KvwarmRecorder} collects
 * it while the sweep runs; {@link kvwarmOffSection} is the section of a run whose decode
 * points all use fake KV.
 *
 * ```ts
 * const rec = new KvwarmRecorder({ requested: "auto", skipReason: null, ... });
 * rec.addStage(stage);
 * rec.pointSeeded("decode:B8:K4096", 8, true);
 * rec.section(); // KvwarmSection
 * ```
 */
import type {
  KvwarmChains,
  KvwarmPointFallback,
  KvwarmSection,
  KvwarmStage,
  PrefillRealSeed,
  TextPoolInfo,
} from "../artifact.ts";

/** `--kvwarm` as asked. */
export type KvwarmRequest = "on" | "off" | "auto";

/** Prefill real seeding counters before anything ran. */
export function prefillRealSeedIdle(enabled: boolean): PrefillRealSeed {
  return { enabled, shots_staged: 0, warm_shots: 0, restages: 0, misses: 0 };
}

/** The section of a run whose decode points use fake KV (`legacy`) because of `skipReason`. */
export function kvwarmOffSection(
  requested: KvwarmRequest,
  skipReason: string,
  extra: {
    readonly dataset?: TextPoolInfo | null;
    readonly chains?: KvwarmChains | null;
    readonly prefillRealSeed?: PrefillRealSeed;
  } = {},
): KvwarmSection {
  return {
    enabled: false,
    requested,
    warm_eligible: false,
    skip_reason: skipReason,
    dataset: extra.dataset ?? null,
    stages: [],
    points_real_kv: 0,
    points_fake_fallback: 0,
    capacity_fallbacks: [],
    shadow_tail: null,
    settlement: null,
    chains: extra.chains ?? null,
    point_fallbacks: [],
    prefill_real_seed: extra.prefillRealSeed ?? prefillRealSeedIdle(false),
  };
}

/** What the recorder knows from the start. */
export interface KvwarmRecorderInit {
  /** `--kvwarm` as asked. */
  readonly requested: KvwarmRequest;
  /** Shadow tails by copy-on-write or zero-filled. */
  readonly shadowTail: "cow" | "zero_fill";
  /** Stage settlement kind. */
  readonly settlement: "local" | "group";
  /** Dataset provenance (as of now; refreshed by `chains`). */
  readonly dataset: () => TextPoolInfo;
  /** Chain content provenance (as of now). */
  readonly chains: () => KvwarmChains;
}

/** Collects the section while the sweep runs (see the module doc above). */
export class KvwarmRecorder {
  readonly #stages: KvwarmStage[] = [];
  readonly #real = new Set<string>();
  readonly #fake = new Map<string, KvwarmPointFallback>();
  readonly #capacity: { batch: number; reason: string }[] = [];

  /** A recorder for a run whose gate let kvwarm run. */
  constructor(readonly init: KvwarmRecorderInit) {}

  /** A rung whose chains cannot fit the pool. */
  addCapacityFallback(batch: number, reason: string): void {
    this.#capacity.push({ batch, reason });
  }

  /** A settled (or abandoned) stage. */
  addStage(stage: KvwarmStage): void {
    this.#stages.push(stage);
  }

  /** Stages so far. */
  get stages(): readonly KvwarmStage[] {
    return this.#stages;
  }

  /**
   * A decode point seeded for a shot: on real KV, or on fake KV with `reason`. A point
   * counts once (its replica and measured shots are one point); a point that fell back
   * after it was counted real moves to the fallbacks.
   */
  pointSeeded(pointKey: string, batch: number, real: boolean, reason: string | null = null): void {
    if (real) {
      if (!this.#fake.has(pointKey)) this.#real.add(pointKey);
      return;
    }
    this.#real.delete(pointKey);
    if (!this.#fake.has(pointKey)) {
      this.#fake.set(pointKey, { point_key: pointKey, batch, reason: reason ?? "fake_fallback" });
    }
  }

  /** The section as of now (`prefill_real_seed` idle: the run puts the prefix seeder's in). */
  section(): KvwarmSection {
    return {
      enabled: true,
      requested: this.init.requested,
      warm_eligible: true,
      skip_reason: null,
      dataset: this.init.dataset(),
      stages: [...this.#stages],
      points_real_kv: this.#real.size,
      points_fake_fallback: this.#fake.size,
      capacity_fallbacks: [...this.#capacity],
      shadow_tail: this.init.shadowTail,
      settlement: this.init.settlement,
      chains: this.init.chains(),
      point_fallbacks: [...this.#fake.values()],
      prefill_real_seed: prefillRealSeedIdle(false),
    };
  }
}
