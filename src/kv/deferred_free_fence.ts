/**
 * The deferred-free fence: blocks that a step still in flight reads are freed only
 * after that step completes.
 *
 * Steps are numbered 1, 2, ... as they are issued and complete in issue order (one GPU
 * queue). A free that names a step still in flight is parked here and handed back by
 * `completeStep` of that step; the caller then returns the blocks to the pool.
 *
 * ```ts
 * const fence = new DeferredFreeFence<string>();
 * const s = fence.beginStep();      // 1
 * fence.defer(s, ["a"]);             // s is in flight: held
 * fence.completeStep(s);             // ["a"]: free them now
 * ```
 */
export class DeferredFreeFence<T> {
  #issued = 0;
  #completed = 0;
  #pending: { stepId: number; items: readonly T[] }[] = [];
  #numPending = 0;

  /** Id of the last step issued (0 before the first). */
  get lastIssuedStep(): number {
    return this.#issued;
  }

  /** Every step up to this id has completed. */
  get lastCompletedStep(): number {
    return this.#completed;
  }

  /** Number of items held until a step completes. */
  get numPending(): number {
    return this.#numPending;
  }

  /** True while step `stepId` has been issued and has not completed. */
  isInFlight(stepId: number): boolean {
    return stepId > this.#completed && stepId <= this.#issued;
  }

  /** Issues the next step and returns its id. */
  beginStep(): number {
    return ++this.#issued;
  }

  /**
   * Holds `items` until step `stepId` completes, or returns them at once (to be freed
   * now) when that step is not in flight.
   */
  defer(stepId: number, items: readonly T[]): readonly T[] {
    if (!this.isInFlight(stepId) || items.length === 0) return items;
    this.#pending.push({ stepId, items });
    this.#numPending += items.length;
    return [];
  }

  /**
   * Marks step `stepId` complete (it must be the oldest in flight) and returns the
   * items whose fence it was, in the order they were deferred.
   */
  completeStep(stepId: number): T[] {
    if (stepId !== this.#completed + 1 || stepId > this.#issued) {
      throw new Error(
        `step ${stepId} completed out of order (last completed ${this.#completed}, ` +
          `last issued ${this.#issued})`,
      );
    }
    this.#completed = stepId;
    const released: T[] = [];
    const kept: { stepId: number; items: readonly T[] }[] = [];
    for (const entry of this.#pending) {
      if (entry.stepId <= stepId) released.push(...entry.items);
      else kept.push(entry);
    }
    this.#pending = kept;
    this.#numPending -= released.length;
    return released;
  }
}
