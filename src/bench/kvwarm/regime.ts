/**
 * The kv_seed_regime vocabulary of the design, one place for every writer and checker
 * of artifacts. Decode: `real_kv` (shadows of a real prefill's chains), `fake_fallback`
 * (kvwarm on, this point on fake KV, with a reason), `legacy` (kvwarm off: fake KV),
 * `skip:<reason>`. Prefill: `real_prefix` (a staged real prefill), `fake_prefix`
 * (injected blocks), `not_applicable` (no prefix read).
 *
 * ```ts
 * isDecodeRegime("real_kv");        // true
 * isKvSeedRegime("skip:no_room");   // true
 * isKvSeedRegime("real");           // false
 * ```
 */
import type { DecodeKvSeedRegime, KvSeedRegime, PrefillKvSeedRegime } from "../artifact.ts";

/** Decode regimes other than `skip:<reason>`. */
export const DECODE_KV_SEED_REGIMES: readonly DecodeKvSeedRegime[] = Object.freeze([
  "real_kv",
  "fake_fallback",
  "legacy",
]);

/** Prefill regimes. */
export const PREFILL_KV_SEED_REGIMES: readonly PrefillKvSeedRegime[] = Object.freeze([
  "real_prefix",
  "fake_prefix",
  "not_applicable",
]);

/** True for `skip:<reason>` with a non-empty reason. */
export function isSkipRegime(v: unknown): v is `skip:${string}` {
  return typeof v === "string" && /^skip:.+/.test(v);
}

/** True for a decode regime (skips included). */
export function isDecodeRegime(v: unknown): v is DecodeKvSeedRegime {
  return (DECODE_KV_SEED_REGIMES as readonly unknown[]).includes(v) || isSkipRegime(v);
}

/** True for a prefill regime. */
export function isPrefillRegime(v: unknown): v is PrefillKvSeedRegime {
  return (PREFILL_KV_SEED_REGIMES as readonly unknown[]).includes(v);
}

/** True for any regime of the vocabulary. */
export function isKvSeedRegime(v: unknown): v is KvSeedRegime {
  return isDecodeRegime(v) || isPrefillRegime(v);
}
