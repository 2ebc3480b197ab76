/**
 * Capacity negotiation: every rank plans its grid against the same limits, the
 * smallest envelope over the ranks, and seeds real KV ("kvwarm") only when every rank
 * can.
 */
import { boolean, checkObject, integer, nullable, type Shape, text } from "./shape_check.ts";

/** What one rank can hold, sent by every rank before the grid is planned. */
export interface CapacityEnvelope {
  /** KV blocks this rank's pool can use. */
  readonly usable_blocks: number;
  /** Longest sequence (prompt + output tokens). */
  readonly max_model_len: number;
  /** Most requests in one step. */
  readonly max_num_seqs: number;
  /** Most tokens scheduled in one step. */
  readonly max_batched_tokens: number;
  /** Whether this rank can seed real KV. */
  readonly kvwarm_eligible: boolean;
  /** Why not (a kvwarm skip reason), or null when eligible. */
  readonly kvwarm_skip_reason: string | null;
}

/** The limits every rank plans with, and the group's kvwarm verdict as seen by one rank. */
export interface NegotiatedCapacity {
  /** Minimum over the ranks. */
  readonly usable_blocks: number;
  /** Minimum over the ranks. */
  readonly max_model_len: number;
  /** Minimum over the ranks. */
  readonly max_num_seqs: number;
  /** Minimum over the ranks. */
  readonly max_batched_tokens: number;
  /** True only when every rank is eligible. */
  readonly kvwarm_eligible: boolean;
  /**
   * null when every rank is eligible; this rank's own reason when it is not;
   * {@link PEER_INELIGIBLE} when it is eligible but another rank is not.
   */
  readonly kvwarm_skip_reason: string | null;
  /** The lowest-numbered ineligible rank and its reason, or null. */
  readonly first_ineligible: { readonly rank: number; readonly reason: string } | null;
}

/** The kvwarm skip reason of an eligible rank whose peer is not eligible. */
export const PEER_INELIGIBLE = "peer_ineligible";

/** The shape of a {@link CapacityEnvelope} in a message. */
export const CAPACITY_ENVELOPE_SHAPE: Shape = {
  usable_blocks: integer(0),
  max_model_len: integer(1),
  max_num_seqs: integer(1),
  max_batched_tokens: integer(1),
  kvwarm_eligible: boolean,
  kvwarm_skip_reason: nullable(text(256)),
};

/** Checks a {@link CapacityEnvelope}: its shape, and a reason exactly when ineligible. */
export function checkCapacityEnvelope(v: unknown): string | null {
  const problem = checkObject(v, CAPACITY_ENVELOPE_SHAPE);
  if (problem !== null) return problem;
  const e = v as CapacityEnvelope;
  if (e.kvwarm_eligible && e.kvwarm_skip_reason !== null) {
    return "is kvwarm_eligible but gives a kvwarm_skip_reason";
  }
  if (!e.kvwarm_eligible && e.kvwarm_skip_reason === null) {
    return "is not kvwarm_eligible but gives no kvwarm_skip_reason";
  }
  return null;
}

/** Checks a {@link NegotiatedCapacity} as rank 0 sends it. */
export function checkNegotiatedCapacity(v: unknown): string | null {
  const problem = checkObject(v, {
    ...CAPACITY_ENVELOPE_SHAPE,
    first_ineligible: nullable((f) => checkObject(f, { rank: integer(0), reason: text(256) })),
  });
  if (problem !== null) return problem;
  const c = v as NegotiatedCapacity;
  if (c.kvwarm_eligible !== (c.first_ineligible === null)) {
    return "has kvwarm_eligible inconsistent with first_ineligible";
  }
  if (c.kvwarm_eligible !== (c.kvwarm_skip_reason === null)) {
    return "has kvwarm_eligible inconsistent with kvwarm_skip_reason";
  }
  return null;
}

/**
 * The group's capacity as seen by `rank`, from every rank's envelope (index = rank).
 *
 * @example
 * ```ts
 * const ok = { usable_blocks: 900, max_model_len: 4096, max_num_seqs: 64,
 *   max_batched_tokens: 8192, kvwarm_eligible: true, kvwarm_skip_reason: null };
 * const no = { ...ok, usable_blocks: 800, kvwarm_eligible: false, kvwarm_skip_reason: "flag_off" };
 * negotiateCapacity([ok, no], 0);
 * // { usable_blocks: 800, ..., kvwarm_eligible: false, kvwarm_skip_reason: "peer_ineligible",
 * //   first_ineligible: { rank: 1, reason: "flag_off" } }
 * ```
 */
export function negotiateCapacity(
  envelopes: readonly CapacityEnvelope[],
  rank: number,
): NegotiatedCapacity {
  if (envelopes.length === 0) throw new RangeError("negotiateCapacity needs at least one envelope");
  if (!(rank >= 0 && rank < envelopes.length)) {
    throw new RangeError(`rank ${rank} has no envelope among ${envelopes.length}`);
  }
  const min = (key: "usable_blocks" | "max_model_len" | "max_num_seqs" | "max_batched_tokens") =>
    Math.min(...envelopes.map((e) => e[key]));
  const firstIndex = envelopes.findIndex((e) => !e.kvwarm_eligible);
  const first_ineligible = firstIndex < 0 ? null : {
    rank: firstIndex,
    reason: envelopes[firstIndex].kvwarm_skip_reason ?? "unknown",
  };
  const own = envelopes[rank];
  return {
    usable_blocks: min("usable_blocks"),
    max_model_len: min("max_model_len"),
    max_num_seqs: min("max_num_seqs"),
    max_batched_tokens: min("max_batched_tokens"),
    kvwarm_eligible: first_ineligible === null,
    kvwarm_skip_reason: first_ineligible === null
      ? null
      : own.kvwarm_eligible
      ? PEER_INELIGIBLE
      : own.kvwarm_skip_reason,
    first_ineligible,
  };
}
