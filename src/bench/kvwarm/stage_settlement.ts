/**
 * How a kvwarm stage settles: on every idle decode-sweep step, the rank reports where
 * its stage build is (`none`, `building`, `done` with ok) and gets a verdict back; the
 * stage settles in the round whose verdict says `allDone`, and is ok only if the verdict
 * says so. One rank settles locally ({@link LocalStageSettlement}: in the step its build
 * finishes); a group of attention-DP ranks settles through the stage round of document
 * 004 (the dp module's `RankSynchronizer.stageRound(seq, batch, phase, ok)` has this
 * shape), so no rank starts a rung's first point, or falls back to fake KV, alone.
 *
 * ```ts
 * const settlement: StageSettlement = new LocalStageSettlement(console.error);
 * const v = await settlement.round(seq, 8, "done", true); // { allDone: true, ok: true }
 * ```
 */

/** Where a rank's stage build is. */
export type StagePhase = "none" | "building" | "done";

/** The group's answer to one round. */
export interface StageRoundVerdict {
  /** Every rank reported `done`: the stage settles in this round. */
  readonly allDone: boolean;
  /** With allDone, true only if every rank's build was ok; otherwise null. */
  readonly ok: boolean | null;
}

/** One stage round per idle step (see the module doc above). */
export interface StageSettlement {
  /**
   * Reports this rank's stage (`batch` null with phase `none`; `ok` only with `done`)
   * for the idle step `seq`, and returns the verdict.
   */
  round(
    seq: number,
    batch: number | null,
    phase: StagePhase,
    ok: boolean | null,
  ): Promise<StageRoundVerdict>;
}

/** The group of one rank: a stage settles in the round its build reports done. */
export class LocalStageSettlement implements StageSettlement {
  /** Settlements so far: `[batch, ok, seq]`. */
  readonly settled: [batch: number | null, ok: boolean, seq: number][] = [];

  /** `log` gets one line per settled stage. */
  constructor(private readonly log: (line: string) => void = () => {}) {}

  /** allDone exactly when `phase` is `done`; then ok is this rank's `ok`. */
  round(
    seq: number,
    batch: number | null,
    phase: StagePhase,
    ok: boolean | null,
  ): Promise<StageRoundVerdict> {
    if ((phase === "none") !== (batch === null)) {
      throw new Error(`stage round ${seq}: phase ${phase} with batch ${batch}`);
    }
    if ((phase === "done") !== (ok !== null)) {
      throw new Error(`stage round ${seq}: phase ${phase} with ok ${ok}`);
    }
    if (phase !== "done") return Promise.resolve({ allDone: false, ok: null });
    this.settled.push([batch, ok === true, seq]);
    this.log(`kvwarm: stage batch=${batch} settled locally (ok=${ok}) at round ${seq}`);
    return Promise.resolve({ allDone: true, ok: ok === true });
  }
}
