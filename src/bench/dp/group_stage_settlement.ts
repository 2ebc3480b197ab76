/**
 * The kvwarm stage round over a group of ranks (document 004): on every idle
 * decode-sweep step each rank reports `(seq, batch, phase, ok)` and every rank leaves
 * the round with the same verdict `{seq, allDone, ok}`: the stage settles on every rank
 * in the round where the last rank reports `done`, ok only if every rank built. A seq or
 * batch mismatch fails every rank with "ranks are not in lockstep". One line per settled
 * stage goes to the log (`kvwarm: stage batch=B settled by the group (ok=...) at round R`),
 * identical on every rank.
 *
 * ```ts
 * const stages = new GroupStageSettlement(points);
 * const v = await stages.round(seq, 8, built ? "done" : "building", built ? ok : null);
 * if (v.allDone && v.ok === false) shedChains(); // every rank, same step
 * ```
 */
import type { DpStageSettlement } from "../artifact.ts";
import type { StageSettlement } from "../kvwarm/stage_settlement.ts";
import type { StagePhase, StageVerdict } from "../../dp/mod.ts";
import type { GroupPointSynchronizer } from "./group_point_synchronizer.ts";

/** Settles stages through the group's stage round (see the module doc above). */
export class GroupStageSettlement implements StageSettlement {
  readonly #points: GroupPointSynchronizer;
  readonly #settled: DpStageSettlement[] = [];

  /** Stage rounds over the group of `points`. */
  constructor(points: GroupPointSynchronizer) {
    this.#points = points;
  }

  /** One stage round; blocks until every rank has reported this round. */
  async round(
    seq: number,
    batch: number | null,
    phase: StagePhase,
    ok: boolean | null,
  ): Promise<StageVerdict> {
    const verdict = await this.#points.stageRound(seq, batch, phase, ok);
    if (verdict.allDone && batch !== null) {
      this.#settled.push({ batch, ok: verdict.ok, round: verdict.seq });
    }
    return verdict;
  }

  /** Stages settled so far, in order. */
  settled(): readonly DpStageSettlement[] {
    return [...this.#settled];
  }
}
