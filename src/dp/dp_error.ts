/**
 * What went wrong in a group of ranks: the synchronizer throws only this error, so a
 * benchmark loop can tell a peer's failure from its own and name the ranks involved.
 *
 * - `timeout`: a wait ran past its limit; `ranks` are the ranks that did not answer.
 * - `protocol`: a message of the wrong shape, the wrong rank or an unknown type.
 * - `lockstep`: ranks are in different rounds, steps or stages ("ranks are not in lockstep").
 * - `disagreement`: ranks in the same round disagree (grid digest, point, scheduled shape).
 * - `peer_failure`: another rank failed or went away; `ranks` names it.
 * - `closed`: the synchronizer was closed or had already failed.
 * - `config`: inconsistent rank identity (flags, Slurm or MPI environment).
 *
 * @example
 * ```ts
 * const err = new DpError("timeout", "rank 2 did not answer", [2]);
 * err.ranks; // [2]
 * ```
 */
export class DpError extends Error {
  /** The kind of failure. */
  readonly code: DpErrorCode;
  /** The ranks the failure is about (those that timed out, failed or disagreed). */
  readonly ranks: readonly number[];

  /** An error of kind `code` about `ranks`. */
  constructor(code: DpErrorCode, message: string, ranks: readonly number[] = []) {
    super(message);
    this.name = "DpError";
    this.code = code;
    this.ranks = [...ranks];
  }
}

/** The kinds of {@link DpError}. */
export type DpErrorCode =
  | "timeout"
  | "protocol"
  | "lockstep"
  | "disagreement"
  | "peer_failure"
  | "closed"
  | "config";

/** Every {@link DpErrorCode}, for validating codes that arrive in messages. */
export const DP_ERROR_CODES: readonly DpErrorCode[] = [
  "timeout",
  "protocol",
  "lockstep",
  "disagreement",
  "peer_failure",
  "closed",
  "config",
];
