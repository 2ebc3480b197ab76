/**
 * Garbage collection at point boundaries: a full collection before each point is prepared,
 * through `globalThis.gc`, which exists when the runtime was started with
 * `--v8-flags=--expose-gc` (the bench task does). Without it the policy is recorded as not
 * exposed. Under Deno the pacing of GPU waits (src/gpu/event_pacing.ts) adds at most one
 * collection every 2 s inside a point, so only a point whose waits last that long sees one.
 *
 * ```ts
 * const gc = new BoundaryGc();
 * gc.collect();        // between points
 * gc.record();         // { policy: "point_boundary", exposed: true, collections: 1, seconds: 0.004 }
 * ```
 */
import type { GcPolicy } from "./artifact.ts";

/** Collections at point boundaries (see the module doc above). */
export class BoundaryGc {
  readonly #gc: (() => void) | null;
  #collections = 0;
  #seconds = 0;

  /** Uses `gc` (default `globalThis.gc` when exposed). */
  constructor(gc?: (() => void) | null) {
    const g = (globalThis as { gc?: unknown }).gc;
    this.#gc = gc !== undefined ? gc : typeof g === "function" ? (g as () => void) : null;
  }

  /** True when collections can be forced. */
  get exposed(): boolean {
    return this.#gc !== null;
  }

  /** Runs a full collection (a no-op when not exposed). */
  collect(): void {
    if (!this.#gc) return;
    const t0 = performance.now();
    this.#gc();
    this.#seconds += (performance.now() - t0) / 1000;
    this.#collections++;
  }

  /** The policy and what it did. */
  record(): GcPolicy {
    return {
      policy: "point_boundary",
      exposed: this.exposed,
      collections: this.#collections,
      seconds: this.#seconds,
    };
  }
}
