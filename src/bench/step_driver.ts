/**
 * Every engine step the benchmark takes goes through the step driver, so that hooks see
 * every one of them: `afterStep` after each step (where attention-DP ranks meet in their
 * per-step barrier), and `onIdleStep` after each step taken while no point is being
 * measured (warm-up, staging, drains between points: where kvwarm's per-step stage
 * round runs). A step whose engine had nothing to run is still a step.
 *
 * ```ts
 * const driver = new StepDriver(engine);
 * driver.addHooks({ afterStep: (seq) => sync.barrier(seq) });
 * const obs = await driver.step();
 * ```
 */
import type { Engine, StepOptions } from "../engine/engine.ts";
import type { StepObservation } from "../engine/step_observation.ts";
import { holdCollections } from "../gpu/event_pacing.ts";

/** Callbacks around every step. */
export interface StepHooks {
  /** After every step, busy or idle (`observation` null when the engine had nothing). */
  afterStep?(seq: number, observation: StepObservation | null): Promise<void> | void;
  /** After every step taken while no point is being measured. */
  onIdleStep?(seq: number, observation: StepObservation | null): Promise<void> | void;
}

/** The benchmark's one way to step the engine (see the module doc above). */
export class StepDriver {
  readonly #hooks: StepHooks[] = [];
  #seq = 0;
  #activePoint: number | null = null;

  /** The benchmark_id being measured, or null between points. */
  get activePoint(): number | null {
    return this.#activePoint;
  }

  /** Sets the point being measured; while one is, the GPU waits' collections are held. */
  set activePoint(id: number | null) {
    this.#activePoint = id;
    holdCollections(id !== null);
  }

  /** Drives `engine`; `hooks` run in order after every step. */
  constructor(readonly engine: Engine, hooks: readonly StepHooks[] = []) {
    this.#hooks.push(...hooks);
  }

  /** Adds hooks (run after the ones already there). */
  addHooks(hooks: StepHooks): void {
    this.#hooks.push(hooks);
  }

  /** Steps taken so far (the seq of the last one). */
  get seq(): number {
    return this.#seq;
  }

  /** One engine step (Engine.step's options), then the hooks. */
  async step(options: StepOptions = {}): Promise<StepObservation | null> {
    const observation = await this.engine.step(options);
    const seq = ++this.#seq;
    for (const h of this.#hooks) {
      await h.afterStep?.(seq, observation);
      if (this.activePoint === null) await h.onIdleStep?.(seq, observation);
    }
    return observation;
  }

  /** Steps until no request waits or runs and no step is in flight (parked ones stay). */
  async drain(): Promise<void> {
    while (this.engine.hasUnfinishedRequests()) {
      const observation = await this.step();
      if (observation === null && this.engine.hasUnfinishedRequests()) {
        throw new Error("the engine cannot make progress while draining the benchmark's requests");
      }
    }
  }
}
