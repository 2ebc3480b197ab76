/**
 * The bench's step trace (`--step-trace FILE`): every engine step the run takes, measured or
 * not, as a JSON line: its sums, and its host times (performance.now() ms) of schedule end,
 * submit (the model's forward returned: the step's commands are on the GPU's queue) and output
 * arrival, and its GPU ms. A measured step's `step_id` in the artifact names its line. It is
 * what the host timeline of a point looks like: where a steady gap read below its step's GPU
 * time (batch 1-4, the first steady step after admission on a busy host), the admission's
 * arrival against the next step's submit says which came first.
 *
 * Lines are kept in memory and written every 256 steps and at `close` (or the process's exit).
 *
 * ```ts
 * const trace = stepTrace("steps.jsonl");
 * await run.run(inputs, { hooks: [trace.hooks] });
 * trace.close();
 * ```
 */
import { appendFileSync, writeFileSync } from "node:fs";
import process from "node:process";
import type { StepHooks } from "./step_driver.ts";

/** Lines kept before a write. */
const BATCH = 256;

/** A trace writing to `path` (created anew). */
export function stepTrace(path: string): { readonly hooks: StepHooks; close(): void } {
  writeFileSync(path, "");
  let lines: string[] = [];
  const write = () => {
    if (lines.length === 0) return;
    appendFileSync(path, lines.join(""));
    lines = [];
  };
  process.once("exit", write);
  const round = (ms: number) => Math.round(ms * 1000) / 1000;
  return {
    hooks: {
      afterStep(seq, o) {
        if (o === null) return;
        lines.push(
          JSON.stringify({
            seq,
            step_id: o.stepId,
            num_requests: o.numRequests,
            num_scheduled_tokens: o.numScheduledTokens,
            num_prefill_requests: o.numPrefillRequests,
            num_decode_requests: o.numDecodeRequests,
            sum_decode_kv_tokens: o.sumDecodeKvTokens,
            schedule_end_ms: round(o.scheduleEndMs),
            submitted_ms: round(o.submittedMs),
            output_arrival_ms: round(o.outputArrivalMs),
            gpu_ms: o.gpuMs === null ? null : round(o.gpuMs),
          }) + "\n",
        );
        if (lines.length >= BATCH) write();
      },
    },
    close: write,
  };
}
