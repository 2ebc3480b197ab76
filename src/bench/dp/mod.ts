/**
 * bench/dp: the glue between the benchmark and the dp module's rank synchronizer
 * (attention data parallelism: several ranks in lockstep). The CLI imports this, never
 * src/dp/ directly.
 *
 * ```ts
 * import { DpRank } from "../bench/dp/mod.ts";
 * const dp = DpRank.create({ argv, env: process.env, gpus: "auto", log: console.error });
 * ```
 */
export { mergedOutPath, rankOutPath } from "./rank_out_path.ts";
export { MergeError, mergeRankArtifacts, mergeRankFiles, stepRoundLine } from "./artifact_merge.ts";
export {
  CPU_ADAPTER_DP_TIMEOUT_SECONDS,
  DEFAULT_DP_TIMEOUT_SECONDS,
  DpRank,
  type DpRankOptions,
} from "./dp_rank.ts";
export { GpuAssignmentError } from "./gpu_assignment.ts";
export { interruptNotice, peerInterrupt } from "./peer_interrupt.ts";
export { GroupPointSynchronizer, SKIPPED_WALL } from "./group_point_synchronizer.ts";
export { GroupStageSettlement } from "./group_stage_settlement.ts";
export { type KvwarmGroupGate } from "./capacity_agreement.ts";
export { DpError } from "../../dp/mod.ts";
