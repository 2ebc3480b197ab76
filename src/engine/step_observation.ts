import type { SchedulerOutput } from "./scheduler_output.ts";

/**
 * What the engine reports of every step, for the benchmark: the scheduled sums that
 * place the step on the latency grid, and its times. Host times are
 * `performance.now()` milliseconds: `scheduleEndMs` when the step was handed to the
 * model (schedule and StepBatch done), `outputArrivalMs` when its sampled tokens
 * arrived on the host. A step's wall time is `outputArrivalMs - scheduleEndMs`; steady
 * decode is the gap between consecutive arrivals. `gpuMs` comes from the model's
 * timestamp queries (null when unavailable).
 */
export interface StepObservation {
  /** Id of the step (1, 2, ... in issue order). */
  readonly stepId: number;
  /** Requests in the step. */
  readonly numRequests: number;
  /** Tokens computed by the step. */
  readonly numScheduledTokens: number;
  /** Requests computing prompt (or recompute) tokens. */
  readonly numPrefillRequests: number;
  /** New tokens of the prefill requests. */
  readonly sumPrefillTokens: number;
  /** KV tokens the prefill requests read (their tokens computed before the step). */
  readonly sumPrefillKvTokens: number;
  /** Requests computing one token after their whole prompt. */
  readonly numDecodeRequests: number;
  /** KV tokens the decode requests read (their tokens computed before the step). */
  readonly sumDecodeKvTokens: number;
  /** Requests preempted while scheduling the step. */
  readonly numPreempted: number;
  /** Copy-on-write block copies the step carried. */
  readonly numBlockCopies: number;
  /** performance.now() when the step was handed to the model. */
  readonly scheduleEndMs: number;
  /** performance.now() when the model's forward returned (its commands submitted). */
  readonly submittedMs: number;
  /** performance.now() when its sampled tokens arrived. */
  readonly outputArrivalMs: number;
  /** GPU time of the step from timestamp queries, or null when unavailable. */
  readonly gpuMs: number | null;
  /** Host ms of the step's `queue.submit` calls inside forward(), or null when not measured. */
  readonly submitCallMs: number | null;
}

/** The scheduled sums of a step, without its times. */
export type StepSums = Omit<
  StepObservation,
  "scheduleEndMs" | "submittedMs" | "outputArrivalMs" | "gpuMs" | "submitCallMs"
>;

/** Sums a scheduler output into the observation's counts. */
export function stepSums(output: SchedulerOutput): StepSums {
  let numPrefillRequests = 0, sumPrefillTokens = 0, sumPrefillKvTokens = 0;
  let numDecodeRequests = 0, sumDecodeKvTokens = 0;
  for (const s of output.scheduled) {
    if (s.isDecode) {
      numDecodeRequests++;
      sumDecodeKvTokens += s.numComputedBefore;
    } else {
      numPrefillRequests++;
      sumPrefillTokens += s.numNewTokens;
      sumPrefillKvTokens += s.numComputedBefore;
    }
  }
  return {
    stepId: output.stepId,
    numRequests: output.scheduled.length,
    numScheduledTokens: output.numScheduledTokens,
    numPrefillRequests,
    sumPrefillTokens,
    sumPrefillKvTokens,
    numDecodeRequests,
    sumDecodeKvTokens,
    numPreempted: output.numPreempted,
    numBlockCopies: output.blockCopies.length,
  };
}
