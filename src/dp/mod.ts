/**
 * dp: several benchmark ranks in lockstep over ZeroMQ (used by bench only).
 *
 * @example
 * ```ts
 * import { RankSynchronizer, resolveRank } from "../dp/mod.ts";
 * const sync = await RankSynchronizer.open(resolveRank({ argv: process.argv.slice(2), env: process.env }));
 * await sync.barrier(0);
 * await sync.finish();
 * ```
 */
export { canonicalJson, iterationWalls, requireEqual, requireEqualShapes } from "./agreement.ts";
export {
  type CapacityEnvelope,
  negotiateCapacity,
  type NegotiatedCapacity,
  PEER_INELIGIBLE,
} from "./capacity.ts";
export { DpError, type DpErrorCode } from "./dp_error.ts";
export { FOLLOWER_GRACE_MS } from "./group_rounds.ts";
export { expandHostlist, firstHost } from "./hostlist.ts";
export { type ScheduledShape } from "./messages.ts";
export {
  DEFAULT_DP_HOST,
  DEFAULT_DP_PORT,
  parseMaster,
  type RankIdentity,
  type RankInputs,
  type RankSource,
  resolveRank,
} from "./rank_identity.ts";
export {
  DEFAULT_DP_TIMEOUT_MS,
  type GatheredResult,
  type RankResult,
  RankSynchronizer,
  type SynchronizerOptions,
} from "./rank_synchronizer.ts";
export { type RoundCost } from "./round_cost.ts";
export { DEFAULT_SPIN_MS } from "./zmq_link.ts";
export {
  settleStageRound,
  type StagePhase,
  stageSettledLine,
  type StageStatus,
  type StageVerdict,
} from "./stage_round.ts";
