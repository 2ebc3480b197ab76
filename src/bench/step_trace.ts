/**
 * The bench's step trace (`--step-trace FILE`): every engine step the run takes, measured or
 * not, as a JSON line: its sums, and its host times (performance.now() ms) of schedule end,
 * submit (the model's forward returned: the step's commands are on the GPU's queue) and output
 * arrival, the ms forward() spent inside `queue.submit` (Dawn's recording of the Vulkan
 * commands; the rest of schedule end to submit is planning and encoding), its GPU ms, and the
 * CPU the host thread was on just after the step (`cpu`, Linux; else null). A
 * measured step's `step_id` in the artifact names its line. It is what the host timeline of a
 * point looks like: where a steady gap read below its step's GPU time (batch 1-4, the first
 * steady step after admission on a busy host), the admission's arrival against the next step's
 * submit says which came first.
 *
 * Steps are only kept while a point runs (no formatting, no disk: nothing in a timed step's
 * way); they are written between points (the idle steps' hook) and at `close`, or at the
 * process's exit. The file is created when the trace is, so a bad path fails before the run.
 * A write that fails later is logged and the trace stops; the run goes on.
 *
 * ```ts
 * const trace = stepTrace("steps.jsonl", console.error);
 * await run.run(inputs, { hooks: [trace.hooks] });
 * trace.close();
 * ```
 */
import { appendFileSync, writeFileSync } from "node:fs";
import process from "node:process";
import type { StepObservation } from "../engine/step_observation.ts";
import type { StepHooks } from "./step_driver.ts";
import { threadCpu } from "../util/thread_cpu.ts";

/** A trace writing to `path` (created anew at once; throws when it cannot be). */
export function stepTrace(
  path: string,
  log: (line: string) => void,
): { readonly hooks: StepHooks; close(): void } {
  writeFileSync(path, "");
  let kept: [number, StepObservation, number | null][] = [];
  let failed = false;
  const round = (ms: number) => Math.round(ms * 1000) / 1000;
  const write = () => {
    if (kept.length === 0 || failed) return;
    const lines = kept.map(([seq, o, cpu]) =>
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
        submit_call_ms: o.submitCallMs === null ? null : round(o.submitCallMs),
        output_arrival_ms: round(o.outputArrivalMs),
        gpu_ms: o.gpuMs === null ? null : round(o.gpuMs),
        cpu,
      }) + "\n"
    );
    kept = [];
    try {
      appendFileSync(path, lines.join(""));
    } catch (err) {
      failed = true;
      log(`step trace: cannot write ${path}: ${(err as Error).message}; the trace stops there`);
    }
  };
  process.once("exit", write);
  return {
    hooks: {
      afterStep(seq, o) {
        if (o !== null && !failed) kept.push([seq, o, threadCpu()]);
      },
      onIdleStep: write,
    },
    close: write,
  };
}
