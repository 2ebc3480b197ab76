/**
 * Capacity negotiation for the benchmark: before the grid is planned every rank offers
 * its envelope (usable KV blocks, model length, step limits) and its kvwarm eligibility;
 * every rank plans against the minimum over ranks, and seeds real KV only when every
 * rank can (an eligible rank whose peer is not records `peer_ineligible`). So all ranks
 * generate the same grid, which the grid digest round then confirms.
 *
 * ```ts
 * const agreed = await agreeCapacity(sync, benchCapacity(engine), decodeSeeder);
 * agreed.capacity; // the envelope to plan with
 * ```
 */
import type { BenchCapacity, DpCapacity } from "../artifact.ts";
import type { DecodeSeeder } from "../decode_seeder.ts";
import { type CapacityEnvelope, PEER_INELIGIBLE, type RankSynchronizer } from "../../dp/mod.ts";

/**
 * A decode seeder that the group can switch off: called when this rank is eligible for
 * real-KV seeding but another rank is not (`reason` is `peer_ineligible`); from then on
 * its `section()` reports that reason and its points use fake KV.
 */
export interface KvwarmGroupGate {
  /** The group is not eligible although this rank is. */
  groupIneligible(reason: string): void;
}

/** What the negotiation gave this rank. */
export interface AgreedCapacity {
  /** The envelope to plan with: this rank's, limited to the group's minimum. */
  readonly capacity: BenchCapacity;
  /** What this rank offered. */
  readonly envelope: DpCapacity;
  /** What the group agreed. */
  readonly negotiated: DpCapacity;
  /** The lowest ineligible rank and its reason, or null. */
  readonly firstIneligible: { readonly rank: number; readonly reason: string } | null;
}

/** This rank's offer: its envelope and the decode seeder's kvwarm gate. */
export function capacityEnvelope(own: BenchCapacity, seeder: DecodeSeeder): CapacityEnvelope {
  const kvwarm = seeder.section();
  const eligible = kvwarm.warm_eligible;
  return {
    usable_blocks: own.usable_blocks,
    max_model_len: own.max_model_len,
    max_num_seqs: own.max_num_seqs,
    max_batched_tokens: own.max_batched_tokens,
    kvwarm_eligible: eligible,
    kvwarm_skip_reason: eligible ? null : (kvwarm.skip_reason ?? "ineligible"),
  };
}

function isGroupGated(seeder: DecodeSeeder): seeder is DecodeSeeder & KvwarmGroupGate {
  return typeof (seeder as Partial<KvwarmGroupGate>).groupIneligible === "function";
}

/** Runs the capacity round on `sync` (see the module doc above). */
export async function agreeCapacity(
  sync: RankSynchronizer,
  own: BenchCapacity,
  seeder: DecodeSeeder,
): Promise<AgreedCapacity> {
  const envelope = capacityEnvelope(own, seeder);
  const n = await sync.negotiateCapacity(envelope);
  if (envelope.kvwarm_eligible && !n.kvwarm_eligible) {
    if (isGroupGated(seeder)) seeder.groupIneligible(n.kvwarm_skip_reason ?? PEER_INELIGIBLE);
    else {
      throw new Error(
        `rank ${sync.rank} is kvwarm-eligible but rank ${n.first_ineligible?.rank} is not ` +
          `(${n.first_ineligible?.reason}), and its decode seeder cannot be switched off ` +
          "(it does not implement groupIneligible)",
      );
    }
  }
  const negotiated: DpCapacity = {
    usable_blocks: n.usable_blocks,
    max_model_len: n.max_model_len,
    max_num_seqs: n.max_num_seqs,
    max_batched_tokens: n.max_batched_tokens,
    kvwarm_eligible: n.kvwarm_eligible,
    kvwarm_skip_reason: n.kvwarm_skip_reason,
  };
  return {
    capacity: {
      ...own,
      usable_blocks: n.usable_blocks,
      max_model_len: n.max_model_len,
      max_num_seqs: n.max_num_seqs,
      max_batched_tokens: n.max_batched_tokens,
    },
    envelope,
    negotiated,
    firstIneligible: n.first_ineligible,
  };
}
