/**
 * Paces the event loop while GPU results are awaited under Deno.
 *
 * dawn.node fires its callbacks (mapAsync, onSubmittedWorkDone) from a loop that re-queues
 * itself with setImmediate and makes a new native function for every turn. Under Deno every
 * such function leaves a N-API finalizer that Deno releases one at a time from the front of
 * a vector: after a few seconds of waiting on a busy GPU, tens of thousands of them pile up
 * and releasing them costs quadratic time. Measured: 30 s stalls between a step's completion
 * and the arrival of its output (a B256 decode step of 0.6 s on the H200; the same on
 * lavapipe), which made bench wall times nonsense. Node releases them cheaply and needs none
 * of this.
 *
 * While anything is awaited through {@link paced}, each turn of the event loop is held for
 * at most {@link TURN_MS} (so the loop turns a few thousand times a second, not hundreds of
 * thousands), and when `gc` is exposed (`--v8-flags=--expose-gc`, as the deno tasks run)
 * a full collection at most every {@link GC_EVERY_MS}, at the first turn of a wait (just
 * after a submit, while the GPU is busy) or during a long one, keeps the pile short. A
 * result is seen at most one turn late (plus a collection's time where one falls on its
 * arrival).
 *
 * A full collection of a large heap takes milliseconds: one that falls on an arrival makes
 * that arrival late and the next gap short (seen on the H200: a steady decode step of 25.8 ms
 * GPU time measured as a 20.8 ms gap). So while a benchmark point is measured
 * ({@link holdCollections}), collections wait {@link GC_HELD_EVERY_MS} instead: none falls in
 * a point whose waits add up to less than that, and a step of many seconds still keeps the
 * pile short (a collection's 10-40 ms against a step of seconds). Outside
 * points they stay full collections: young-generation ones (0.3 ms instead of 10-40 ms) were
 * tried on the H200 and do not release the finalizers; a served replay then stalled 0.3-10 s
 * after long steps (13.8 s in all over 854 steps), where full ones every 200 ms gave no stall
 * (late arrivals of at most 78 ms, p90 6 ms, on a trace from the same generator settings,
 * with the previous kernels).
 *
 * A held turn is shorter ({@link TURN_HELD_MS}), for at most {@link FINE_TURNS_HELD} turns a
 * hold: an arrival seen up to 0.2 ms late made steady gaps of short steps (a batch-2 decode step
 * of 8.7 ms on the H200) differ by 2-2.5% between two runs of one manifest. The budget keeps a
 * held point's pile of finalizers no larger than a 2 s hold of full-length turns made; past it
 * (points of long steps, whose gaps 0.2 ms hardly moves) the turns are full length again.
 *
 * ```ts
 * const out = await paced(staging.mapAsync(GPUMapMode.READ));
 * ```
 */
import process from "node:process";
import { setImmediate } from "node:timers";

/** Longest hold of one event-loop turn while GPU results are awaited, ms. */
export const TURN_MS = 0.2;
/**
 * The same while a measurement holds collections, ms (a timed wait on Linux lasts at least the
 * thread's timer slack, 50 µs by default).
 */
export const TURN_HELD_MS = 0.05;
/** Short turns a hold may take before its turns are TURN_MS long again. */
export const FINE_TURNS_HELD = 10000;
/** Waiting time between collections (where `gc` is exposed), ms. */
export const GC_EVERY_MS = 200;
/** The same while collections are held (a benchmark point is being measured), ms. */
export const GC_HELD_EVERY_MS = 2000;

const isDeno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined" &&
  process.env.WEBFPM_EVENT_PACING !== "0";
const gc = (globalThis as { gc?: () => void }).gc;
const cell = new Int32Array(new SharedArrayBuffer(4));
let waiting = 0;
let running = false;
let lastGc = 0;
let held = false;
let fineTurns = 0;

/**
 * Holds the paced collections (`true`) while a measurement runs, releases them (`false`)
 * after: held, a collection falls at most every {@link GC_HELD_EVERY_MS}, counted from the
 * hold (the point's start, just after the bench's boundary collection). Counted from the
 * pacing's own last collection instead, a collection owed from before the point fell on its
 * first waits: on the H200 (2026-12-01) two decode points of a medium grid read a steady
 * wall of about half their GPU time, the admission step's arrival made late.
 */
export function holdCollections(hold: boolean): void {
  if (hold && !held) {
    lastGc = performance.now();
    fineTurns = FINE_TURNS_HELD;
  }
  held = hold;
}

/** How long the next paced turn may hold the event loop, ms (it spends a short turn if held). */
export function nextTurnMs(): number {
  if (!held || fineTurns === 0) return TURN_MS;
  fineTurns--;
  return TURN_HELD_MS;
}

/** Whether a paced wait at `now` (ms, performance.now()) runs a collection. */
export function collectionDue(now: number): boolean {
  return now - lastGc >= (held ? GC_HELD_EVERY_MS : GC_EVERY_MS);
}

function turn(): void {
  if (waiting === 0) {
    running = false;
    return;
  }
  Atomics.wait(cell, 0, 0, nextTurnMs());
  if (gc && collectionDue(performance.now())) {
    gc();
    lastGc = performance.now();
  }
  setImmediate(turn);
}

/** `promise`, awaited with the event loop paced (see the module doc); as is outside Deno. */
export function paced<T>(promise: Promise<T>): Promise<T> {
  if (!isDeno) return promise;
  waiting++;
  if (!running) {
    running = true;
    setImmediate(turn);
  }
  return promise.finally(() => {
    waiting--;
  });
}
