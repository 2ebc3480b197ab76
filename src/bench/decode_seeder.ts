/**
 * Where a decode point's KV comes from. The sweep asks its seeder to order the decode
 * points, to name each point's kv_seed_regime before the grid is numbered, to prepare
 * at the boundary before a point (kvwarm stages chains there, stepping the engine
 * through the step driver), and to put the point's requests straight into running in
 * the untimed admission window. {@link FakeKvSeeder} injects fake KV (regime `legacy`);
 * kvwarm's seeder registers shadows of parked chains instead.
 *
 * ```ts
 * const seeder = new FakeKvSeeder({ requested: "off", skipReason: "flag_off" });
 * const outcome = seeder.seed(engine, requests); // untimed: blocks allocated, hashed, registered
 * ```
 */
import type { Engine } from "../engine/engine.ts";
import type { Request } from "../engine/request.ts";
import type { BenchPoint, DecodeKvSeedRegime, DecodePoint, KvwarmSection } from "./artifact.ts";
import { kvwarmOffSection } from "./kvwarm/section.ts";
import type { StepDriver } from "./step_driver.ts";

/** One request a decode point needs. */
export interface DecodeSeedRequest {
  /** Engine request id. */
  readonly requestId: string;
  /** Index within the point. */
  readonly slot: number;
  /** Prompt from the content salt (`computed + 1` tokens); a seeder may use its own. */
  readonly prompt: Int32Array;
  /** Tokens to count as computed (`max(1, ctx - 1)`). */
  readonly computed: number;
  /** Its unique cache_salt. */
  readonly cacheSalt: string;
  /** Output tokens: the admission step's plus one per steady step. */
  readonly maxTokens: number;
}

/** What seeding gave. */
export type DecodeSeedOutcome =
  | {
    /** Every request is running. */
    readonly ok: true;
    /** The requests, by slot. */
    readonly requests: readonly Request[];
    /** Preparation method for the artifact. */
    readonly method: string;
    /** KV blocks the seeding took. */
    readonly blocks: number;
  }
  | {
    /** Nothing was left behind. */
    readonly ok: false;
    /** Why (becomes the skipped point's reason). */
    readonly reason: string;
  };

/** A source of decode KV (see the module doc above). */
export interface DecodeSeeder {
  /** Decode points (given batch desc, KV desc) in execution order. */
  order(points: readonly DecodePoint[]): DecodePoint[];
  /**
   * The point's regime: asked once before the grid is numbered (it decides median-of-N)
   * and again when the point's row is written, so a point whose stage failed at run time
   * records `fake_fallback`.
   */
  regime(point: DecodePoint): DecodeKvSeedRegime;
  /**
   * At the boundary before every point, prefill points included (untimed; may step the
   * engine through `driver`: kvwarm stages a rung's chains there, and releases them
   * before the first point that does not read them). The sweep calls it for the first point
   * twice, inside the clock warm-up and at the point's boundary: a second call for the point
   * already prepared must do nothing.
   */
  beforePoint(point: BenchPoint, driver: StepDriver): Promise<void>;
  /** Untimed admission window: every request straight into running, or nothing. */
  seed(engine: Engine, requests: readonly DecodeSeedRequest[]): DecodeSeedOutcome;
  /** End of the sweep (or its failure): release whatever the seeder holds. */
  finish(driver: StepDriver): Promise<void>;
  /** The artifact's kvwarm section. */
  section(): KvwarmSection;
}

/**
 * Fake KV injection: each request gets blocks for `computed + 1` tokens, the first
 * `computed` marked computed, full blocks hashed and registered now (never inside a
 * timed step); the KV content is whatever the blocks hold.
 */
export class FakeKvSeeder implements DecodeSeeder {
  /**
   * @param kvwarm what `--kvwarm` asked for and why real KV is not used
   */
  constructor(
    private readonly kvwarm: {
      readonly requested: "on" | "off" | "auto";
      readonly skipReason: string;
    },
  ) {}

  /** Keeps the order (batch desc, KV desc). */
  order(points: readonly DecodePoint[]): DecodePoint[] {
    return [...points];
  }

  /** Always `legacy`. */
  regime(_point: DecodePoint): DecodeKvSeedRegime {
    return "legacy";
  }

  /** Nothing to stage. */
  beforePoint(_point: BenchPoint, _driver: StepDriver): Promise<void> {
    return Promise.resolve();
  }

  /** Injects every request, or sheds the ones injected and reports the shortfall. */
  seed(engine: Engine, requests: readonly DecodeSeedRequest[]): DecodeSeedOutcome {
    const inUse = engine.kvUsage().inUse;
    const done: Request[] = [];
    for (const r of requests) {
      const request = engine.injectRunning(r.prompt, r.computed, {
        maxTokens: r.maxTokens,
        ignoreEos: true,
        cacheSalt: r.cacheSalt,
      }, { requestId: r.requestId });
      if (request === null) {
        for (const d of done) engine.shed(d.requestId);
        const u = engine.kvUsage();
        return {
          ok: false,
          reason: `fake_kv_injection_failed: slot ${r.slot} (${r.computed} computed tokens) ` +
            `does not fit: ${u.free} blocks free, watermark ${u.watermarkBlocks}`,
        };
      }
      done.push(request);
    }
    return {
      ok: true,
      requests: done,
      method: "fake_kv_injection",
      blocks: engine.kvUsage().inUse - inUse,
    };
  }

  /** Holds nothing. */
  finish(_driver: StepDriver): Promise<void> {
    return Promise.resolve();
  }

  /** kvwarm off (or not available): every decode row is `legacy`. */
  section(): KvwarmSection {
    return kvwarmOffSection(this.kvwarm.requested, this.kvwarm.skipReason);
  }
}
