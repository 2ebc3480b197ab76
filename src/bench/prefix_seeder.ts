/**
 * Where a prefill point's cached prefix comes from. {@link FakePrefixSeeder} injects
 * each request's prefix blocks (allocated, hashed and registered, never computed) and
 * frees them at once: they stay in the prefix cache at refcount 0, and the measuring
 * request, with the same cache_salt and the same leading tokens, must hit exactly them
 * (the sweep checks the hit; a miss skips the point). Real prefix seeding (a staged
 * prefill, behind a flag) plugs in here.
 *
 * ```ts
 * const seeded = await new FakePrefixSeeder().seed(driver, prefixes);
 * ```
 */
import type { PrefillKvSeedRegime, PrefillPoint } from "./artifact.ts";
import type { StepDriver } from "./step_driver.ts";

/** One request's prefix to seed. */
export interface PrefixSeedRequest {
  /** Index within the point. */
  readonly slot: number;
  /** The measuring request's prompt (prefix + new tokens). */
  readonly prompt: Int32Array;
  /** Prefix tokens to seed (whole blocks, > 0). */
  readonly prefixTokens: number;
  /** The measuring request's cache_salt (the seeded blocks must hash like its own). */
  readonly cacheSalt: string;
  /** An id for the seeding request. */
  readonly requestId: string;
}

/** What seeding gave. */
export type PrefixSeedOutcome =
  | {
    /** Every prefix is cached. */
    readonly ok: true;
    /** Preparation method for the artifact. */
    readonly method: string;
    /** KV blocks seeded. */
    readonly blocks: number;
  }
  | {
    /** Why not (the skipped point's reason). */
    readonly ok: false;
    /** Reason. */
    readonly reason: string;
  };

/** A source of prefill prefixes. */
export interface PrefixSeeder {
  /** The regime a KV-read point gets. */
  regime(point: PrefillPoint): PrefillKvSeedRegime;
  /** Seeds every prefix (untimed). */
  seed(driver: StepDriver, requests: readonly PrefixSeedRequest[]): Promise<PrefixSeedOutcome>;
}

/** Fake prefix: inject the prefix blocks, shed at once, leave them cached. */
export class FakePrefixSeeder implements PrefixSeeder {
  /** `fake_prefix` for a point with K > 0, else `not_applicable`. */
  regime(point: PrefillPoint): PrefillKvSeedRegime {
    return point.total_kv_read_tokens > 0 ? "fake_prefix" : "not_applicable";
  }

  /** Injects `prefix + 1` tokens with `prefix` computed per request, then sheds it. */
  seed(driver: StepDriver, requests: readonly PrefixSeedRequest[]): Promise<PrefixSeedOutcome> {
    const engine = driver.engine;
    let blocks = 0;
    for (const r of requests) {
      if (r.prefixTokens === 0) continue;
      const prompt = r.prompt.subarray(0, r.prefixTokens + 1);
      const seeded = engine.injectRunning(prompt, r.prefixTokens, {
        maxTokens: 1,
        ignoreEos: true,
        cacheSalt: r.cacheSalt,
      }, { requestId: r.requestId });
      if (seeded === null) {
        return Promise.resolve({
          ok: false,
          reason: `fake_prefix_injection_failed: slot ${r.slot} (${r.prefixTokens} prefix ` +
            `tokens) does not fit in the pool`,
        });
      }
      blocks += r.prefixTokens / engine.kv.blockSize;
      engine.shed(seeded.requestId);
    }
    return Promise.resolve({ ok: true, method: "fake_prefix", blocks });
  }
}
