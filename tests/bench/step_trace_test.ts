/**
 * The bench's step trace: a JSON line per engine step, its host times in order, and every
 * measured step of the artifact found in it by step_id.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { stepTrace } from "../../src/bench/step_trace.ts";
import { cpuBench, runCpuBench } from "./bench_harness.ts";

test("every step of a run is a line, its times in order, and the measured steps are among them", async () => {
  const path = join(mkdtempSync(join(tmpdir(), "step-trace-")), "steps.jsonl");
  const trace = stepTrace(path, () => {});
  const bench = cpuBench({
    schema_version: 1,
    decode: [{ batch_size: 2, total_kv_read_tokens: 20 }],
    prefill: [{ batch_size: 1, total_prefill_tokens: 8, total_kv_read_tokens: 0 }],
  });
  const { artifact } = await runCpuBench(bench, { hooks: [trace.hooks] });
  trace.close();
  const lines = readFileSync(path, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  assert.ok(lines.length >= 8, `${lines.length} steps`);
  for (const l of lines) {
    assert.ok(l.schedule_end_ms <= l.submitted_ms, `step ${l.step_id}: submitted before scheduled`);
    assert.ok(l.submitted_ms <= l.output_arrival_ms, `step ${l.step_id}: arrived before submit`);
    assert.ok(l.num_scheduled_tokens > 0);
    // the CPU test model does not measure its submits
    assert.is(l.submit_call_ms, null);
    if (process.platform === "linux") {
      assert.ok(Number.isInteger(l.cpu), `step ${l.step_id}: cpu ${l.cpu}`);
    }
  }
  assert.equal(lines.map((l) => l.seq), lines.map((_, i) => i + 1));
  const traced = new Set(lines.map((l) => l.step_id));
  const measured = artifact.results.flatMap((r) =>
    r.fpms[0].benchmark_measurement.samples.map((s) => s.step_id)
  );
  assert.ok(measured.length >= 2);
  for (const id of measured) assert.ok(traced.has(id), `measured step ${id} is in the trace`);
  // a steady decode sample's line: two decode requests reading the point's KV
  const steady = lines.find((l) =>
    l.step_id === artifact.results[0].fpms[0].benchmark_measurement
      .samples[0].step_id
  );
  assert.equal([steady.num_decode_requests, steady.num_prefill_requests], [2, 0]);
});

test("lines are written between points, not in a measured step; a bad path fails at once", async () => {
  const dir = mkdtempSync(join(tmpdir(), "step-trace-"));
  const path = join(dir, "steps.jsonl");
  const trace = stepTrace(path, () => {});
  const o = { stepId: 1, scheduleEndMs: 1, submittedMs: 2, outputArrivalMs: 3, gpuMs: 1 };
  trace.hooks.afterStep!(1, o as never);
  trace.hooks.afterStep!(2, { ...o, stepId: 2 } as never);
  assert.is(readFileSync(path, "utf8"), "", "nothing written inside a point");
  await trace.hooks.onIdleStep!(3, null);
  assert.is(readFileSync(path, "utf8").trim().split("\n").length, 2);
  assert.throws(
    () => stepTrace(join(dir, "no", "such", "dir", "t.jsonl"), () => {}),
    /ENOENT|No such/,
  );
});

test.run();
