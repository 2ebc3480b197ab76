/**
 * A miniature benchmark sweep that every rank of a test group runs, in-process or in
 * its own process: capacity, grid digest, one staged rung (rank r builds for r + 1
 * steps, each step ending in the group barrier), two points, then the orderly end.
 */
import type { NegotiatedCapacity } from "../../src/dp/capacity.ts";
import type { RankSynchronizer } from "../../src/dp/rank_synchronizer.ts";
import type { StageVerdict } from "../../src/dp/stage_round.ts";

/** What one rank saw during {@link runSweep}. */
export interface SweepSummary {
  readonly rank: number;
  readonly capacity: NegotiatedCapacity;
  readonly digest: string;
  readonly verdicts: StageVerdict[];
  readonly iterationWalls: number[][];
  readonly gatheredRanks: number[] | null;
  readonly stop: boolean;
  readonly barrierRounds: number;
}

/** Runs the sweep on `sync`; every rank of the group must run it. */
export async function runSweep(sync: RankSynchronizer): Promise<SweepSummary> {
  const r = sync.rank;
  const capacity = await sync.negotiateCapacity({
    usable_blocks: 1000 - 100 * r,
    max_model_len: 4096,
    max_num_seqs: 32,
    max_batched_tokens: 4096,
    kvwarm_eligible: r !== 2,
    kvwarm_skip_reason: r === 2 ? "flag_off" : null,
  });
  const digest = await sync.agreeGridDigest("grid-v1");
  const verdicts: StageVerdict[] = [];
  let step = 0;
  for (let built = 0; verdicts.length === 0 || !verdicts[verdicts.length - 1].allDone;) {
    step++;
    if (built < r + 1) built++;
    const done = built === r + 1;
    verdicts.push(await sync.stageRound(step, 4, done ? "done" : "building", done ? true : null));
    await sync.barrier(step);
  }
  const iterationWalls: number[][] = [];
  let gatheredRanks: number[] | null = null;
  let stop = false;
  for (const id of [1, 2]) {
    await sync.ready(id, `decode:4:${1024 * id}`);
    await sync.arm(id, { num_requests: 4, scheduled_tokens: 4 });
    const result = await sync.gatherResult(id, [0.01 * (r + 1), 0.02], { rank: r, id });
    iterationWalls.push([...result.iteration_walls]);
    gatheredRanks = result.ranks?.map((x) => x.rank) ?? null;
    await sync.cleanup(id);
    stop = await sync.boundaryVote(id, false);
  }
  await sync.finish();
  return {
    rank: r,
    capacity,
    digest,
    verdicts,
    iterationWalls,
    gatheredRanks,
    stop,
    barrierRounds: sync.barrierCost().rounds,
  };
}
