/**
 * The cost of the group's rounds (e.g. the per-step barrier), in microseconds of wall
 * time from entering a round to leaving it with the group's answer. On a rank that
 * arrives first this includes the wait for the slowest rank; compare it with the step
 * time to see what lockstep costs.
 */

/** A summary of the rounds of one kind so far. */
export interface RoundCost {
  /** Rounds completed. */
  readonly rounds: number;
  /** Sum of their durations, microseconds. */
  readonly total_us: number;
  /** total_us / rounds (0 with no rounds). */
  readonly mean_us: number;
  /** The longest round, microseconds. */
  readonly max_us: number;
  /** The latest round, microseconds. */
  readonly last_us: number;
}

/**
 * Accumulates round durations.
 *
 * @example
 * ```ts
 * const cost = new RoundCostMeter();
 * cost.add(120); cost.add(80);
 * cost.summary(); // { rounds: 2, total_us: 200, mean_us: 100, max_us: 120, last_us: 80 }
 * ```
 */
export class RoundCostMeter {
  #rounds = 0;
  #total = 0;
  #max = 0;
  #last = 0;

  /** Records one round that took `us` microseconds. */
  add(us: number): void {
    this.#rounds++;
    this.#total += us;
    this.#max = Math.max(this.#max, us);
    this.#last = us;
  }

  /** The summary so far. */
  summary(): RoundCost {
    return {
      rounds: this.#rounds,
      total_us: this.#total,
      mean_us: this.#rounds === 0 ? 0 : this.#total / this.#rounds,
      max_us: this.#max,
      last_us: this.#last,
    };
  }
}
