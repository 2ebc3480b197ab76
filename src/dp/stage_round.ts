/**
 * The stage round (document 004): on every idle decode-sweep step each rank reports
 * its stage status, and every rank leaves the round with the same verdict. A stage
 * settles in the round where the last rank reports `done`; its verdict is ok only if
 * every rank's build was ok. Because every rank blocks in the same round of the same
 * step, no rank can start the rung's first point before the others have the verdict.
 */
import { DpError } from "./dp_error.ts";
import { boolean, checkObject, integer, nullable, oneOf, type Shape } from "./shape_check.ts";

/** Where a rank's stage build is: no stage, still building, or done (ok or not). */
export type StagePhase = "none" | "building" | "done";

/** One rank's report in a stage round. */
export interface StageStatus {
  /** The round number; equal on every rank in the same round. */
  readonly seq: number;
  /** The batch of the rung being staged; null with phase `none`. */
  readonly batch: number | null;
  /** This rank's build phase. */
  readonly phase: StagePhase;
  /** With phase `done`: whether this rank's chains built; otherwise null. */
  readonly ok: boolean | null;
}

/** What every rank gets back from a stage round. */
export interface StageVerdict {
  /** The round number. */
  readonly seq: number;
  /** Whether every rank reported `done`: the stage settles in this round. */
  readonly allDone: boolean;
  /** With allDone: true only if every rank's build was ok; otherwise null. */
  readonly ok: boolean | null;
}

const STAGE_STATUS_SHAPE: Shape = {
  seq: integer(0),
  batch: nullable(integer(1)),
  phase: oneOf("none", "building", "done"),
  ok: nullable(boolean),
};

/**
 * Checks a {@link StageStatus}: its shape, a batch exactly when a stage is active, and
 * a verdict exactly when the phase is `done` (a missing or spurious verdict is an error).
 */
export function checkStageStatus(v: unknown): string | null {
  const problem = checkObject(v, STAGE_STATUS_SHAPE);
  if (problem !== null) return problem;
  const s = v as StageStatus;
  if ((s.phase === "none") !== (s.batch === null)) {
    return s.phase === "none"
      ? "has phase 'none' but names a batch"
      : `has phase '${s.phase}' but no batch`;
  }
  if ((s.phase === "done") !== (s.ok !== null)) {
    return s.phase === "done"
      ? "has phase 'done' but no ok verdict"
      : `has phase '${s.phase}' but a spurious ok verdict`;
  }
  return null;
}

/** Checks a verdict as rank 0 sends it: ok is a boolean exactly when all ranks are done. */
export function checkStageVerdict(v: unknown): string | null {
  const problem = checkObject(v, { seq: integer(0), all_done: boolean, ok: nullable(boolean) });
  if (problem !== null) return problem;
  const d = v as { all_done: boolean; ok: boolean | null };
  if (d.all_done && d.ok === null) return "says all ranks are done but gives no ok verdict";
  if (!d.all_done && d.ok !== null) return "gives an ok verdict before all ranks are done";
  return null;
}

/**
 * Settles one stage round from every rank's status (index = rank). Throws a
 * {@link DpError} with code `lockstep` ("ranks are not in lockstep") when the ranks
 * report different seq or batch.
 *
 * @example
 * ```ts
 * settleStageRound([
 *   { seq: 4, batch: 8, phase: "done", ok: true },
 *   { seq: 4, batch: 8, phase: "building", ok: null },
 * ]); // { seq: 4, allDone: false, ok: null }
 * ```
 */
export function settleStageRound(statuses: readonly StageStatus[]): StageVerdict {
  if (statuses.length === 0) throw new RangeError("settleStageRound needs at least one status");
  const first = statuses[0];
  const outOfStep = statuses
    .map((s, rank) => ({ s, rank }))
    .filter(({ s }) => s.seq !== first.seq || s.batch !== first.batch);
  if (outOfStep.length > 0) {
    const list = statuses.map((s, rank) => `rank ${rank} seq=${s.seq} batch=${s.batch}`).join(", ");
    throw new DpError(
      "lockstep",
      `ranks are not in lockstep: stage round statuses differ (${list})`,
      outOfStep.map(({ rank }) => rank),
    );
  }
  const allDone = statuses.every((s) => s.phase === "done");
  return { seq: first.seq, allDone, ok: allDone ? statuses.every((s) => s.ok === true) : null };
}

/**
 * The one log line of a settled stage, identical on every rank so a run can be audited
 * for one settlement round per stage.
 *
 * @example
 * ```ts
 * stageSettledLine(8, true, 12); // "stage batch=8 settled by the group (ok=true) at round 12"
 * ```
 */
export function stageSettledLine(batch: number | null, ok: boolean | null, seq: number): string {
  return `stage batch=${batch} settled by the group (ok=${ok}) at round ${seq}`;
}
