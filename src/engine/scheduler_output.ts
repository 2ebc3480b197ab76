/**
 * What one `schedule()` decided: the requests of the step with their new tokens, the
 * copy-on-write block copies that ride it, and which request owns each sampled row.
 * The step batch builder turns it into a StepBatch; the update reads it back when the
 * step's output arrives.
 */
import type { BlockCopy } from "../kv/kv_cache_manager.ts";
import type { Request } from "./request.ts";

/** One request's share of a step. */
export interface ScheduledRequest {
  /** The request. */
  readonly request: Request;
  /** Tokens computed in this step (>= 1). */
  readonly numNewTokens: number;
  /** Tokens computed before this step: the KV it reads. */
  readonly numComputedBefore: number;
  /** Tokens whose values were known at schedule time; positions past them are placeholders. */
  readonly numKnownTokens: number;
  /** Row of the previous step's sampled output that holds the placeholder input, or -1. */
  readonly prevSampleRow: number;
  /** Row of this step's sampled output that belongs to the request, or -1 (a prefill chunk). */
  readonly sampleRow: number;
  /** One new token after the whole prompt was computed: a decode, else a prefill (chunk). */
  readonly isDecode: boolean;
}

/** One issued step. */
export interface SchedulerOutput {
  /** Id the KV manager issued the step under (1, 2, ...). */
  readonly stepId: number;
  /** The requests of the step, in batch order (running first, then admitted). */
  readonly scheduled: readonly ScheduledRequest[];
  /** Sum of numNewTokens. */
  readonly numScheduledTokens: number;
  /** Requests preempted (KV dropped, back to waiting) while scheduling this step. */
  readonly numPreempted: number;
  /** KV block copies [src, dst] to run before the step's attention. */
  readonly blockCopies: readonly BlockCopy[];
  /** KV blocks to zero-fill before the step's copies and attention (shadow tails without CoW). */
  readonly blockZeros?: readonly number[];
  /** The request of each sampled row, in row order. */
  readonly sampleRequests: readonly Request[];
}
