/**
 * Serves a request trace through the engine the way production would: each request is
 * added when its arrival time comes (real time, from the start of serving), the engine
 * batches whatever is waiting and running (continuous batching, chunked prefill), and
 * every step is reported with its shape and times. When nothing is waiting or running the
 * loop sleeps until the next arrival.
 *
 * ```ts
 * const engine = new Engine(model, { asyncScheduling: true });
 * const result = await serveTrace(engine, requests, { onStep: (s) => out.write(formatStepLine(s)) });
 * result.finished; // { length: 200 }
 * ```
 */
import type { Engine } from "../engine/engine.ts";
import type { StepObservation } from "../engine/step_observation.ts";
import type { ServedStep } from "../report/served_steps.ts";

/** A trace request with its prompt tokenized for the model. */
export interface ServedRequest {
  readonly id: string;
  readonly arrivalMs: number;
  readonly promptIds: Int32Array;
  readonly maxTokens: number;
}

/** What serving reports besides the steps. */
export interface ServeResult {
  readonly steps: number;
  readonly elapsedMs: number;
  /** Finished requests by finish reason. */
  readonly finished: Readonly<Record<string, number>>;
}

/** Options of `serveTrace`. */
export interface ServeOptions {
  /** Called with every step, in completion order. */
  readonly onStep?: (step: ServedStep) => void;
  /** Waits `ms` (default: a timer). */
  readonly sleep?: (ms: number) => Promise<void>;
}

/**
 * Serves `requests` (sorted by arrival) to completion. Outputs ignore EOS so each request
 * generates its trace's `max_tokens` (or stops at max_model_len); prefix caching works as
 * configured, with no salts, as in production.
 */
export async function serveTrace(
  engine: Engine,
  requests: readonly ServedRequest[],
  options: ServeOptions = {},
): Promise<ServeResult> {
  const sleep = options.sleep ?? ((ms: number) => new Promise((r) => setTimeout(r, ms)));
  for (let i = 1; i < requests.length; i++) {
    if (requests[i].arrivalMs < requests[i - 1].arrivalMs) {
      throw new Error(`request ${requests[i].id} arrives before ${requests[i - 1].id}`);
    }
  }
  const finished: Record<string, number> = {};
  let numSteps = 0;
  let prevArrival = -Infinity;
  const t0 = performance.now();
  let next = 0;
  const admit = () => {
    const now = performance.now() - t0;
    while (next < requests.length && requests[next].arrivalMs <= now) {
      const r = requests[next++];
      engine.addRequest(r.promptIds, { maxTokens: r.maxTokens, ignoreEos: true }, {
        requestId: r.id,
        onOutput: (out) => {
          if (out.finished) {
            const reason = out.request.finishReason ?? "unknown";
            finished[reason] = (finished[reason] ?? 0) + 1;
          }
        },
      });
    }
  };
  while (next < requests.length || engine.hasUnfinishedRequests()) {
    admit();
    if (!engine.hasUnfinishedRequests()) {
      await sleep(Math.max(0, requests[next].arrivalMs - (performance.now() - t0)));
      continue;
    }
    const obs = await engine.step();
    if (obs === null) {
      if (engine.hasUnfinishedRequests()) {
        throw new Error("the engine cannot make progress with the requests it holds");
      }
      continue;
    }
    numSteps++;
    options.onStep?.(servedStep(obs, prevArrival, t0));
    prevArrival = obs.outputArrivalMs;
  }
  return { steps: numSteps, elapsedMs: performance.now() - t0, finished };
}

/** The step-log line of an observation (exported for tests). */
export function servedStep(obs: StepObservation, prevArrivalMs: number, t0: number): ServedStep {
  const round = (x: number) => Math.round(x * 1000) / 1000;
  return {
    kind: "step",
    step_id: obs.stepId,
    num_requests: obs.numRequests,
    num_scheduled_tokens: obs.numScheduledTokens,
    num_prefill_requests: obs.numPrefillRequests,
    sum_prefill_tokens: obs.sumPrefillTokens,
    sum_prefill_kv_tokens: obs.sumPrefillKvTokens,
    num_decode_requests: obs.numDecodeRequests,
    sum_decode_kv_tokens: obs.sumDecodeKvTokens,
    num_preempted: obs.numPreempted,
    num_block_copies: obs.numBlockCopies,
    t_ms: round(obs.scheduleEndMs - t0),
    wall_ms: round(obs.outputArrivalMs - obs.scheduleEndMs),
    interval_ms: round(obs.outputArrivalMs - Math.max(obs.scheduleEndMs, prevArrivalMs)),
    gpu_ms: obs.gpuMs === null ? null : round(obs.gpuMs),
  };
}
