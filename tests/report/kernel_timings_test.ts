import { test } from "uvu";
import * as assert from "uvu/assert";
import { summarizeSpans } from "../../src/report/kernel_timings.ts";
import { chromeTrace, kernelFamily } from "../../src/report/chrome_trace.ts";

const spans = [
  { label: "rmsnorm", kernel: "rmsnorm", us: 10, startUs: 0 },
  { label: "linear qkv", kernel: "gemv", us: 40, startUs: 12 },
  { label: "rmsnorm", kernel: "rmsnorm", us: 10, startUs: 55 },
  { label: "moe_block", kernel: "moe_block", us: 140, startUs: 70 },
];
const cost = new Map([
  ["rmsnorm", { calls: 2, bytes: 2_000_000, flops: 100 }],
  ["linear qkv", { calls: 1, bytes: 8_000_000, flops: 4e6 }],
]);

test("rows per label: calls, µs, share, GB/s and % of the roof from the cost model", () => {
  const s = summarizeSpans([{ spans, cost }, {
    spans: spans.map((x) => ({ ...x, us: x.us * 3 })),
    cost,
  }], {
    bandwidthGbps: 400,
  });
  assert.equal(s.steps, 2);
  assert.equal(s.step_us, 400);
  assert.equal(s.rows.map((r) => r.label), ["moe_block", "linear qkv", "rmsnorm"]);
  const qkv = s.rows[1];
  assert.equal([qkv.calls, qkv.us, qkv.share, qkv.bytes], [1, 80, 0.2, 8_000_000]);
  assert.ok(Math.abs(qkv.gb_per_s! - 100) < 1e-9); // 8 MB in 80 µs
  assert.ok(Math.abs(qkv.roof_pct! - 25) < 1e-9);
  assert.ok(Math.abs(qkv.tflop_per_s! - 0.05) < 1e-12);
  assert.equal(s.rows[2].calls, 2);
  // no cost entry: no bytes, no rates
  assert.equal([s.rows[0].bytes, s.rows[0].gb_per_s, s.rows[0].roof_pct], [null, null, null]);
});

test("without a bandwidth the roof column is empty; no steps is an error", () => {
  const s = summarizeSpans([{ spans, cost }]);
  assert.equal(s.rows[1].roof_pct, null);
  assert.ok(s.rows[1].gb_per_s! > 0);
  assert.throws(() => summarizeSpans([]), /no profiled steps/);
});

test("the Chrome trace has one complete event per dispatch on its family's named track, and the step", () => {
  const t = chromeTrace(spans, {
    title: "decode B=1",
    extra: new Map([["linear qkv", { bytes_per_call: 8e6 }]]),
  });
  const complete = t.traceEvents.filter((e) => e.ph === "X");
  assert.equal(complete.length, spans.length + 1);
  const names = new Map(
    t.traceEvents.filter((e) => e.name === "thread_name").map((e) => [e.tid, e.args!.name]),
  );
  const qkv = complete.find((e) => e.name === "linear qkv")!;
  assert.equal([qkv.ts, qkv.dur, names.get(qkv.tid)], [12, 40, "linear"]);
  assert.equal(qkv.args!.bytes_per_call, 8e6);
  const step = complete.find((e) => e.cat === "step")!;
  assert.equal([step.ts, step.dur, step.name], [0, 210, "decode B=1"]);
  assert.equal(JSON.parse(JSON.stringify(t)).displayTimeUnit, "ms");
  assert.equal(
    ["paged_attention_decode", "linear o", "moe_block", "rmsnorm", "sample", "kv_block_copy"].map(
      kernelFamily,
    ),
    ["attention", "linear", "moe", "norm", "other", "attention"],
  );
});

test.run();
