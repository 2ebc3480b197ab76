/**
 * Salts of benchmark requests. Every request gets a unique `cache_salt` (it enters the
 * hash of block 0, so one salt isolates the whole request from every other request's
 * prefix cache); its tokens come from a separate content salt, so a replica, a repeat
 * shot or a fake-prefix seeder can share content without sharing cache entries.
 *
 * ```ts
 * const salts = new SaltScheme("run-1f3a", 0);
 * salts.cacheSalt(7, "measure", 0, 3); // "bench:run-1f3a:dp0:7:measure0:3"
 * contentSalt("decode:B8:K65536", 3);  // "decode:B8:K65536:3"
 * ```
 */

/** What a request is for. */
export type RequestRole = "measure" | "replica" | "warmup";

/** Cache salts of one rank of one run. */
export class SaltScheme {
  /**
   * @param runId the run (salts never repeat across runs)
   * @param rank the rank (salts never repeat across ranks)
   */
  constructor(readonly runId: string, readonly rank: number) {}

  /** The unique cache_salt of request `slot` of shot `shot` of point `benchmarkId`. */
  cacheSalt(benchmarkId: number, role: RequestRole, shot: number, slot: number): string {
    return `bench:${this.runId}:dp${this.rank}:${benchmarkId}:${role}${shot}:${slot}`;
  }
}

/** The content salt of request `slot` of a point: the same on every run, shot and replica. */
export function contentSalt(pointKey: string, slot: number): string {
  return `${pointKey}:${slot}`;
}

/** The seed string of a content salt: `content-v1:{content_seed}:dp{rank}:{salt}`. */
export function contentSeedString(contentSeed: string, rank: number, salt: string): string {
  return `content-v1:${contentSeed}:dp${rank}:${salt}`;
}
