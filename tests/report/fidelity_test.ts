import { test } from "uvu";
import * as assert from "uvu/assert";
import { fidelity, quantile } from "../../src/report/fidelity.ts";
import { libraryRows } from "../../src/report/latency_library.ts";
import {
  formatStepLine,
  parseServedSteps,
  type ServedStep,
  stepKind,
} from "../../src/report/served_steps.ts";
import {
  decodePoint,
  prefillPoint,
  syntheticArtifact,
  type SyntheticRow,
} from "./synthetic_artifact.ts";

function step(id: number, s: Partial<ServedStep>, ms: number): ServedStep {
  const base = {
    kind: "step" as const,
    step_id: id,
    num_requests: 0,
    num_scheduled_tokens: 0,
    num_prefill_requests: 0,
    sum_prefill_tokens: 0,
    sum_prefill_kv_tokens: 0,
    num_decode_requests: 0,
    sum_decode_kv_tokens: 0,
    num_preempted: 0,
    num_block_copies: 0,
    t_ms: id,
    wall_ms: ms,
    interval_ms: ms,
    gpu_ms: null,
    ...s,
  };
  return { ...base, num_requests: base.num_prefill_requests + base.num_decode_requests };
}
const decodeStep = (id: number, b: number, k: number, ms: number) =>
  step(id, { num_decode_requests: b, sum_decode_kv_tokens: k, num_scheduled_tokens: b }, ms);
const prefillStep = (id: number, t: number, ms: number) =>
  step(id, { num_prefill_requests: 1, sum_prefill_tokens: t, num_scheduled_tokens: t }, ms);

// Library: decode wall = 10 ms flat on batch 1..4 x 4..400 KV per request (real_kv),
// 20 ms flat for the same points measured on fake KV (legacy); prefill 5 ms + 0.01 ms/token.
function rows() {
  const r: SyntheticRow[] = [];
  for (const b of [1, 4]) {
    for (const per of [4, 400]) {
      r.push({ point: decodePoint(b, b * per), regime: "real_kv", walls: [0.010] });
      r.push({ point: decodePoint(b, b * per), regime: "legacy", walls: [0.020] });
    }
  }
  for (const t of [100, 1000]) {
    r.push({ point: prefillPoint(1, t), regime: "not_applicable", walls: [(5 + 0.01 * t) / 1000] });
  }
  return libraryRows([syntheticArtifact(r)]);
}

test("errors are scored per step kind and per regime; steps outside the domain are counted, not scored", () => {
  const steps = [
    decodeStep(1, 2, 100, 10), // real_kv exact (0%), legacy 100%; merged library: median 15 -> 50%
    decodeStep(2, 2, 100, 12.5), // real_kv 20%
    prefillStep(3, 500, 10), // prefill truth: 10 ms -> 0%
    step(4, {
      num_prefill_requests: 1,
      sum_prefill_tokens: 299,
      num_decode_requests: 1,
      sum_decode_kv_tokens: 40,
      num_scheduled_tokens: 300,
    }, 16), // mixed: 300 tokens, kv 40 -> fit 8 ms (50%), grid outside
    decodeStep(5, 8, 80, 10), // batch 8: outside
  ];
  const report = fidelity(rows(), steps, { methods: ["grid", "fit"] });
  const g = (regime: string, method: string, kind: string) =>
    report.groups.find((x) => x.regime === regime && x.method === method && x.kind === kind)!;
  const realDecode = g("real_kv", "grid", "decode");
  assert.equal([realDecode.steps, realDecode.scored, realDecode.outside], [3, 2, 1]);
  assert.ok(Math.abs(realDecode.mapePct! - 10) < 1e-9 && Math.abs(realDecode.p50Pct! - 10) < 1e-9);
  assert.ok(Math.abs(realDecode.p90Pct! - 18) < 1e-9);
  const legacyDecode = g("legacy", "grid", "decode");
  assert.ok(Math.abs(legacyDecode.mapePct! - (100 + 60) / 2) < 1e-9);
  assert.ok(Math.abs(legacyDecode.biasPct! - 80) < 1e-9);
  assert.equal(g("all", "grid", "prefill").mapePct, 0);
  assert.equal(g("all", "grid", "mixed").outside, 1);
  assert.ok(Math.abs(g("all", "fit", "mixed").mapePct! - 50) < 1e-6);
  assert.equal(g("all", "grid", "all").steps, 5);
  assert.ok(report.outsideReasons.some((r) => /batch N is outside/.test(r.reason)));
  // the prefill regime's own lines score prefill and mixed steps only
  assert.equal(g("not_applicable", "grid", "all").steps, 2);
});

test("the metric picks the served time, and steps without it are left out", () => {
  const steps = [
    { ...decodeStep(1, 1, 4, 10), wall_ms: 30, gpu_ms: 5 },
    { ...decodeStep(2, 1, 4, 10), gpu_ms: null },
  ];
  const byWall = fidelity(rows(), steps, {
    metric: "wall",
    methods: ["grid"],
    regimes: ["real_kv"],
  });
  const all = byWall.groups.find((x) => x.regime === "all" && x.kind === "all")!;
  assert.ok(Math.abs(all.mapePct! - (200 / 3 + 0) / 2) < 1e-9);
  const byGpu = fidelity(rows(), steps, { metric: "gpu", methods: ["grid"], regimes: ["real_kv"] });
  assert.equal(byGpu.untimed, 1);
  assert.equal(byGpu.groups.find((x) => x.regime === "all" && x.kind === "all")!.scored, 1);
});

test("a step whose interval is shorter than its GPU time is scored with the step before it", () => {
  // Truth: three 10 ms decode steps; the second one's arrival was seen 6 ms late, so the
  // log says 16 ms then 4 ms. Scored alone: 60% and 60%; scored as one unit: exact.
  const steps = [
    { ...decodeStep(1, 2, 100, 10), gpu_ms: 10 },
    { ...decodeStep(2, 2, 100, 16), gpu_ms: 10 },
    { ...decodeStep(3, 2, 100, 4), gpu_ms: 10 },
  ];
  const report = fidelity(rows(), steps, { methods: ["grid"], regimes: ["real_kv"] });
  const all = report.groups.find((x) => x.regime === "all" && x.kind === "decode")!;
  assert.is(report.coalesced, 1);
  assert.equal([all.steps, all.scored], [3, 3]);
  assert.is(all.mapePct, 0);
  // Other metrics never coalesce: the GPU time is what it is.
  const byGpu = fidelity(rows(), steps, { metric: "gpu", methods: ["grid"], regimes: ["real_kv"] });
  assert.is(byGpu.coalesced, 0);
  // An interval read as exactly 0 joins too (the second arrival came in the same turn).
  const zero = fidelity(rows(), [
    { ...decodeStep(1, 2, 100, 20), gpu_ms: 10 },
    { ...decodeStep(2, 2, 100, 0), gpu_ms: 10 },
  ], { methods: ["grid"], regimes: ["real_kv"] });
  assert.equal([zero.coalesced, zero.untimed], [1, 0]);
  assert.is(zero.groups.find((x) => x.regime === "all" && x.kind === "decode")!.mapePct, 0);
  // A late decode step joined to a prefill step is scored under "all" only, not as a
  // decode or prefill step, and not by the per-regime predictors.
  const cross = fidelity(rows(), [
    { ...prefillStep(1, 500, 10), gpu_ms: 10 },
    { ...decodeStep(2, 2, 100, 5), gpu_ms: 10 },
  ], { methods: ["grid"] });
  const g = (regime: string, kind: string) =>
    cross.groups.find((x) => x.regime === regime && x.kind === kind);
  assert.equal([g("all", "all")!.steps, g("all", "all")!.scored], [2, 2]);
  assert.is(g("all", "decode"), undefined);
  assert.is(g("all", "prefill"), undefined);
  assert.is(g("real_kv", "all"), undefined);
  // A first step has nothing to join.
  const first = fidelity(rows(), [{ ...decodeStep(1, 2, 100, 4), gpu_ms: 10 }], {
    methods: ["grid"],
    regimes: ["real_kv"],
  });
  assert.is(first.coalesced, 0);
});

test("quantile interpolates between order statistics", () => {
  assert.equal(quantile([3, 1, 2], 0.5), 2);
  assert.ok(Math.abs(quantile([0, 10], 0.9) - 9) < 1e-12);
  assert.throws(() => quantile([], 0.5), /nothing/);
});

test("a step log round-trips and malformed lines are named", () => {
  const header = {
    kind: "replay_header" as const,
    schema_version: 1 as const,
    model: "m",
    trace: { path: "t", sha256: "x", requests: 1 },
    engine: {},
    gpu: "g",
    started_at: "now",
  };
  const text = formatStepLine(header) + formatStepLine(decodeStep(1, 2, 10, 3)) +
    formatStepLine({
      kind: "replay_summary",
      requests: 1,
      finished: { length: 1 },
      steps: 1,
      elapsed_s: 1,
      prompt_length_mismatches: 0,
    });
  const log = parseServedSteps(text, "s.jsonl");
  assert.equal(log.steps.length, 1);
  assert.equal(stepKind(log.steps[0]), "decode");
  assert.equal(log.summary?.steps, 1);
  const bad = formatStepLine(header) +
    JSON.stringify({ ...decodeStep(1, 2, 10, 3), sum_decode_kv_tokens: -1 }) + "\n";
  assert.throws(
    () => parseServedSteps(bad, "s.jsonl"),
    /s\.jsonl:2: sum_decode_kv_tokens must be an integer >= 0/,
  );
  assert.throws(
    () => parseServedSteps(formatStepLine(decodeStep(1, 1, 1, 1)), "s"),
    /first line must be the replay_header/,
  );
});

test("a unit of two kinds is scored under 'all' only, by no regime's predictor", () => {
  // A prefill step, then a decode step seen late (interval under 90% of its GPU time): one
  // unit of two kinds. fidelity.ts's module doc: "A unit of steps of different kinds is
  // scored under "all" only, by the whole library."
  const report = fidelity(rows(), [
    { ...prefillStep(1, 500, 10), gpu_ms: 10 },
    { ...decodeStep(2, 2, 100, 5), gpu_ms: 10 },
  ], { methods: ["grid"] });
  assert.is(report.coalesced, 1);
  const g = (regime: string, kind: string) =>
    report.groups.find((x) => x.regime === regime && x.kind === kind);
  assert.ok(g("all", "all"));
  assert.is(g("real_kv", "all"), undefined); // the decode regimes leave it out ...
  // ... but the prefill regime's predictor scores it (decode step predicted by every decode
  // regime's rows merged), so its "all" line holds a decode step.
  assert.is(
    g("not_applicable", "all"),
    undefined,
    `not_applicable/all scored ${
      g("not_applicable", "all")?.scored
    } steps of a prefill+decode unit`,
  );
});

test.run();
