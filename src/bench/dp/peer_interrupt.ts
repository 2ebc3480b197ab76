/**
 * An interrupt (Ctrl-C, SIGTERM) on one rank stops the whole group: the interrupted rank
 * aborts the group with {@link interruptNotice}, and every other rank, whose next round
 * fails with that notice forwarded, ends as interrupted too (`partial`, its points kept)
 * rather than failed.
 *
 * ```ts
 * await dp.abort(interruptNotice("SIGINT"));
 * peerInterrupt(err); // "SIGINT on rank 1" when err is that notice forwarded, else null
 * ```
 */
import { DpError } from "../../dp/mod.ts";

/** The error a rank aborts its group with when it is interrupted by `signal`. */
export function interruptNotice(signal: string): Error {
  return new Error(`interrupted by ${signal}`);
}

/** `<signal> on rank <r>` when `err` is another rank's interrupt notice, else null. */
export function peerInterrupt(err: unknown): string | null {
  if (!(err instanceof DpError)) return null;
  const m = /\brank (\d+) failed: interrupted by (SIG[A-Z]+)$/.exec(err.message);
  return m ? `${m[2]} on rank ${m[1]}` : null;
}
