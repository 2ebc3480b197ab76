/**
 * What the per-step group barrier costs a rank, against the steps it ends: each round's
 * duration (messaging plus the wait for the slowest rank) and the time from leaving one
 * barrier to entering the next (the engine step and the benchmark's own host work). An
 * interval that holds a point-boundary round (READY, ARM, result gather, ...) is not a
 * step and is not counted; a round inside a step (kvwarm's stage round on an idle step)
 * is taken out of the step's time.
 *
 * ```ts
 * const meter = new StepRoundMeter();
 * await meter.measure(() => sync.barrier(seq)); // after every step
 * meter.interrupt();                            // a point-boundary round ran in between
 * meter.exclude(0.3);                           // a 0.3 ms round inside the step
 * meter.summary(); // { rounds, mean_us, p50_us, p90_us, max_us, mean_step_ms, share }
 * ```
 */
import type { DpStepRound } from "../artifact.ts";

/** Accumulates barrier rounds and the steps between them (see the module doc above). */
export class StepRoundMeter {
  #roundsUs = new Float64Array(1024);
  #count = 0;
  #stepMs = 0;
  #steps = 0;
  #lastEnd: number | null = null;
  #excludedMs = 0;

  /** Runs one barrier `round`, timing it and the step that came before it. */
  async measure(round: () => Promise<void>): Promise<void> {
    const t0 = performance.now();
    if (this.#lastEnd !== null) {
      this.#stepMs += Math.max(0, t0 - this.#lastEnd - this.#excludedMs);
      this.#steps++;
    }
    this.#lastEnd = null;
    this.#excludedMs = 0;
    await round();
    const t1 = performance.now();
    this.record((t1 - t0) * 1000);
    this.#lastEnd = t1;
  }

  /** Something other than a step ran since the last barrier: the interval is not a step. */
  interrupt(): void {
    this.#lastEnd = null;
    this.#excludedMs = 0;
  }

  /** A round of `ms` milliseconds ran inside the current step: not the step's time. */
  exclude(ms: number): void {
    this.#excludedMs += ms;
  }

  /** Records one round of `us` microseconds (without a step interval). */
  record(us: number): void {
    if (this.#count === this.#roundsUs.length) {
      const grown = new Float64Array(this.#roundsUs.length * 2);
      grown.set(this.#roundsUs);
      this.#roundsUs = grown;
    }
    this.#roundsUs[this.#count++] = us;
  }

  /** Records a step interval of `ms` milliseconds. */
  recordStep(ms: number): void {
    this.#stepMs += ms;
    this.#steps++;
  }

  /** The summary so far (zeros before the first round). */
  summary(): DpStepRound {
    const n = this.#count;
    const sorted = this.#roundsUs.slice(0, n).sort();
    const total = sorted.reduce((s, x) => s + x, 0);
    const at = (q: number) => (n === 0 ? 0 : sorted[Math.min(n - 1, Math.floor(q * n))]);
    const meanStepMs = this.#steps === 0 ? 0 : this.#stepMs / this.#steps;
    const roundMs = n === 0 ? 0 : total / n / 1000;
    return {
      rounds: n,
      mean_us: n === 0 ? 0 : total / n,
      p50_us: at(0.5),
      p90_us: at(0.9),
      max_us: n === 0 ? 0 : sorted[n - 1],
      mean_step_ms: meanStepMs,
      share: roundMs + meanStepMs > 0 ? roundMs / (roundMs + meanStepMs) : 0,
    };
  }
}
