/**
 * Real prefix seeding of prefill KV-read points (behind `--prefill-real-seed`; regime
 * `real_prefix`): a shot's prefixes are computed by a real prefill instead of injected.
 * For every shot, in the untimed window before its measured step:
 *
 * 1. stage: one request per slot computes the slot's prefix (`prompt[:prefix]`) under the
 *    measuring request's cache_salt, and another under a warm-up salt; they finish and
 *    their full blocks stay in the prefix cache at refcount 0;
 * 2. warm shot: requests with the warm-up salts and the measuring prompts run the point's
 *    exact step shape once (B requests, T new tokens after K cached ones), untimed, so
 *    the measured step is not the first of its shape after a staging step of another;
 * 3. exact-hit validation: the warm shot must have hit exactly each prefix, and a lookup
 *    of each measuring prompt must find exactly its prefix cached (the warm shot's
 *    allocations may have evicted it);
 * 4. on a miss, one re-stage (fresh warm-up salts), then the point is skipped with the
 *    reason.
 *
 * The measured shot then runs as with a fake prefix (the sweep checks its hit again).
 *
 * ```ts
 * const seeder = new RealPrefixSeeder();
 * planPoints(decode, prefill, decodeSeeder, seeder, policy); // K > 0 -> real_prefix
 * ```
 */
import type { KvRequest } from "../../kv/kv_request.ts";
import type { PrefillKvSeedRegime, PrefillPoint, PrefillRealSeed } from "../artifact.ts";
import type { PrefixSeeder, PrefixSeedOutcome, PrefixSeedRequest } from "../prefix_seeder.ts";
import type { StepDriver } from "../step_driver.ts";

/** The preparation method of real-prefix shots. */
export const REAL_PREFIX_METHOD = "real_prefix_staged";

/** Real prefix seeding (see the module doc above). */
export class RealPrefixSeeder implements PrefixSeeder {
  #staged = 0;
  #warmShots = 0;
  #restages = 0;
  #misses = 0;

  /** `log` gets a line per re-stage and per miss. */
  constructor(private readonly log: (line: string) => void = () => {}) {}

  /** `real_prefix` for a point with K > 0, else `not_applicable`. */
  regime(point: PrefillPoint): PrefillKvSeedRegime {
    return point.total_kv_read_tokens > 0 ? "real_prefix" : "not_applicable";
  }

  /** The counters for the artifact. */
  stats(): PrefillRealSeed {
    return {
      enabled: true,
      shots_staged: this.#staged,
      warm_shots: this.#warmShots,
      restages: this.#restages,
      misses: this.#misses,
    };
  }

  /** Stages, warms and validates the shot's prefixes (see the module doc above). */
  async seed(
    driver: StepDriver,
    requests: readonly PrefixSeedRequest[],
  ): Promise<PrefixSeedOutcome> {
    const withPrefix = requests.filter((r) => r.prefixTokens > 0);
    if (withPrefix.length === 0) return { ok: true, method: REAL_PREFIX_METHOD, blocks: 0 };
    if (withPrefix.length !== requests.length) {
      return { ok: false, reason: "real_prefix: every request of a KV-read point has a prefix" };
    }
    this.#staged++;
    let problem = "";
    for (let attempt = 0; attempt < 2; attempt++) {
      if (attempt === 1) {
        this.#restages++;
        this.log(`real prefix: re-staging (${problem})`);
      }
      const warmSalt = (r: PrefixSeedRequest) => `${r.cacheSalt}:warm${attempt}`;
      await this.#stage(driver, requests, (r) => r.cacheSalt, `:stage${attempt}`);
      await this.#stage(driver, requests, warmSalt, `:warmstage${attempt}`);
      problem = await this.#warmShot(driver, requests, warmSalt, attempt);
      if (problem === "") problem = this.#lookupMisses(driver, requests);
      if (problem === "") {
        const bs = driver.engine.kv.blockSize;
        const blocks = requests.reduce((s, r) => s + r.prefixTokens / bs, 0);
        return { ok: true, method: REAL_PREFIX_METHOD, blocks };
      }
    }
    this.#misses++;
    this.log(`real prefix: miss after one re-stage (${problem})`);
    return { ok: false, reason: `real_prefix_miss: ${problem} (after one re-stage)` };
  }

  /** One request per slot computes `prompt[:prefix]` under `salt(r)`; drained. */
  async #stage(
    driver: StepDriver,
    requests: readonly PrefixSeedRequest[],
    salt: (r: PrefixSeedRequest) => string,
    suffix: string,
  ): Promise<void> {
    for (const r of requests) {
      driver.engine.addRequest(
        r.prompt.subarray(0, r.prefixTokens),
        { maxTokens: 1, ignoreEos: true, cacheSalt: salt(r) },
        { requestId: `${r.requestId}${suffix}` },
      );
    }
    await driver.drain();
  }

  /** The point's step shape once under the warm-up salts; a problem, or "". */
  async #warmShot(
    driver: StepDriver,
    requests: readonly PrefixSeedRequest[],
    salt: (r: PrefixSeedRequest) => string,
    attempt: number,
  ): Promise<string> {
    this.#warmShots++;
    const warm = requests.map((r) =>
      driver.engine.addRequest(r.prompt, { maxTokens: 1, ignoreEos: true, cacheSalt: salt(r) }, {
        requestId: `${r.requestId}:warm${attempt}`,
      })
    );
    const o = await driver.step();
    await driver.drain();
    const misses = warm.flatMap((w, i) =>
      w.numCachedTokens === requests[i].prefixTokens
        ? []
        : [`warm slot ${requests[i].slot} hit ${w.numCachedTokens} of ${requests[i].prefixTokens}`]
    );
    if (misses.length > 0) return misses.join("; ");
    const tokens = requests.reduce((s, r) => s + r.prompt.length - r.prefixTokens, 0);
    const kv = requests.reduce((s, r) => s + r.prefixTokens, 0);
    if (
      o === null || o.numPrefillRequests !== requests.length || o.sumPrefillTokens !== tokens ||
      o.sumPrefillKvTokens !== kv
    ) {
      return `the warm shot's step had another shape (${o?.numPrefillRequests ?? 0} requests, ` +
        `${o?.sumPrefillTokens ?? 0} tokens after ${o?.sumPrefillKvTokens ?? 0})`;
    }
    return "";
  }

  /** Looks each measuring prompt up in the prefix cache: a problem, or "" when all exact. */
  #lookupMisses(driver: StepDriver, requests: readonly PrefixSeedRequest[]): string {
    const kv = driver.engine.kv;
    const out: string[] = [];
    for (const r of requests) {
      const probe: KvRequest = {
        requestId: `${r.requestId}:probe`,
        tokenIds: r.prompt,
        numComputedTokens: 0,
        cacheSalt: r.cacheSalt,
        blockHashes: [],
      };
      const hit = kv.getComputedBlocks(probe).numComputedTokens;
      if (hit !== r.prefixTokens) out.push(`slot ${r.slot} finds ${hit} of ${r.prefixTokens}`);
    }
    return out.join("; ");
  }
}
