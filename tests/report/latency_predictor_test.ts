import { test } from "uvu";
import * as assert from "uvu/assert";
import { libraryRows } from "../../src/report/latency_library.ts";
import { LatencyPredictor, OutsideDomainError } from "../../src/report/latency_predictor.ts";
import { LadderGrid } from "../../src/report/ladder_interpolation.ts";
import {
  decodePoint,
  prefillPoint,
  syntheticArtifact,
  type SyntheticRow,
} from "./synthetic_artifact.ts";

/** Ground truth (seconds): decode 2 ms + 0.1 ms/request + 1 µs/KV token; prefill 1 ms + 5 µs/token. */
const decodeS = (b: number, k: number) => (2 + 0.1 * b + 0.001 * k) / 1000;
const prefillS = (t: number) => (1 + 0.005 * t) / 1000;

// Decode ladders differ per batch (as the generated grid's do):
//   batch 1:  KV 1, 64, 1024          batch 4: KV 4, 256, 4096        batch 16: KV 16, 1024
function library(regime: "real_kv" | "legacy" = "real_kv"): SyntheticRow[] {
  const ladders: Record<number, number[]> = { 1: [1, 64, 1024], 4: [4, 256, 4096], 16: [16, 1024] };
  const rows: SyntheticRow[] = [];
  for (const [b, kvs] of Object.entries(ladders)) {
    for (const k of kvs) rows.push({ point: decodePoint(+b, k), regime, walls: [decodeS(+b, k)] });
  }
  for (const t of [16, 64, 256, 1024]) {
    rows.push({ point: prefillPoint(1, t), regime: "not_applicable", walls: [prefillS(t)] });
  }
  return rows;
}

test("grid: an exact point returns its measurement; between points it is linear along the ladder", () => {
  const p = LatencyPredictor.fromArtifacts([syntheticArtifact(library())]);
  assert.ok(Math.abs(p.decode(4, 256, "grid").wallMs - 1000 * decodeS(4, 256)) < 1e-9);
  // (4, 1000) lies between 256 and 4096 on batch 4's ladder; the truth is linear in KV
  assert.ok(Math.abs(p.decode(4, 1000, "grid").wallMs - 1000 * decodeS(4, 1000)) < 1e-9);
});

test("grid: a batch between two collected batches blends their ladders at the same KV per request", () => {
  const p = LatencyPredictor.fromArtifacts([syntheticArtifact(library())]);
  // batch 2 at 32 KV/request: batch 1 at 32 (between 1 and 64) and batch 4 at 32 (between 4 and 256)
  const got = p.decode(2, 64, "grid").wallMs;
  const at1 = 1000 * decodeS(1, 32), at4 = 1000 * decodeS(4, 128);
  assert.ok(Math.abs(got - (at1 + (at4 - at1) / 3)) < 1e-9, String(got));
  // the truth is bilinear in (batch, KV) and so is the interpolation along those lines
  assert.ok(Math.abs(got - 1000 * decodeS(2, 64)) < 1e-9);
});

test("grid refuses to extrapolate, naming the coordinate and the collected range", () => {
  const p = LatencyPredictor.fromArtifacts([syntheticArtifact(library())]);
  assert.throws(
    () => p.decode(32, 64, "grid"),
    (e: Error) =>
      e instanceof OutsideDomainError &&
      /batch 32 is outside the collected batch range \[1, 16\]/.test(e.message),
  );
  // batch 8 brackets 4 (max 1024/request) and 16 (max 64/request): 100/request is outside 16's ladder
  assert.throws(
    () => p.decode(8, 800, "grid"),
    (e: Error) =>
      e instanceof OutsideDomainError &&
      /outside the collected range \[1, 64\] at batch 16/.test(e.message),
  );
  assert.throws(() => p.prefill(2048, {}, "grid"), (e: Error) => e instanceof OutsideDomainError);
  assert.throws(() => p.prefill(100, { kv: 512 }, "grid"), /KV-read tokens 512 is outside/);
});

test("fit: NNLS recovers the planner coefficients and refuses outside the fitted ranges", () => {
  const p = LatencyPredictor.fromArtifacts([syntheticArtifact(library())]);
  const d = p.decodeFit!;
  assert.equal(d.terms, ["1", "requests", "kv_tokens"]);
  assert.ok(Math.abs(d.coefficients[0] - 2) < 1e-6 && Math.abs(d.coefficients[1] - 0.1) < 1e-7);
  assert.ok(Math.abs(d.coefficients[2] - 0.001) < 1e-9, String(d.coefficients));
  assert.ok(Math.abs(p.decode(7, 3000, "fit").wallMs - 1000 * decodeS(7, 3000)) < 1e-6);
  assert.ok(Math.abs(p.prefill(500, {}, "fit").wallMs - 1000 * prefillS(500)) < 1e-6);
  assert.throws(
    () => p.decode(2, 5000, "fit"),
    /KV tokens 5000 is outside the collected range \[1, 4096\]/,
  );
  assert.throws(
    () => p.prefill(8, {}, "fit"),
    /prefill tokens 8 is outside the collected range \[16, 1024\]/,
  );
});

test("prefill grid: linear in tokens within a KV slice, blended between slices, and by batch when asked", () => {
  const rows: SyntheticRow[] = [];
  for (const k of [0, 512]) {
    for (const t of [64, 256]) {
      rows.push({
        point: prefillPoint(2, t, k),
        regime: k ? "fake_prefix" : "not_applicable",
        walls: [(1 + 0.01 * t + 0.002 * k) / 1000],
      });
    }
  }
  rows.push({ point: prefillPoint(4, 64, 0), regime: "not_applicable", walls: [0.005] });
  const p = LatencyPredictor.fromArtifacts([syntheticArtifact(rows)]);
  assert.ok(
    Math.abs(p.prefill(128, { kv: 256, batch: 2 }, "grid").wallMs - (1 + 1.28 + 0.512)) < 1e-9,
  );
  assert.ok(Math.abs(p.prefill(64, { batch: 4 }, "grid").wallMs - 5) < 1e-9);
  // pooled over batches, the two rows at (64, 0) merge by their median
  assert.ok(Math.abs(p.prefill(64, {}, "grid").wallMs - (1.64 + 5) / 2) < 1e-9);
  assert.throws(
    () => p.prefill(64, { batch: 8 }, "grid"),
    /no prefill rows at batch 8; collected batches: 2, 4/,
  );
});

test("the regime filter keeps only the asked rows, and an empty library is refused clearly", () => {
  const a = syntheticArtifact([...library("real_kv"), {
    point: decodePoint(1, 64),
    regime: "legacy",
    walls: [1],
  }]);
  const real = LatencyPredictor.fromArtifacts([a], { regimes: ["real_kv"] });
  assert.ok(Math.abs(real.decode(1, 64, "grid").wallMs - 1000 * decodeS(1, 64)) < 1e-9);
  const legacy = LatencyPredictor.fromArtifacts([a], { regimes: ["legacy"] });
  assert.equal(legacy.decode(1, 64, "grid").wallMs, 1000);
  assert.throws(() => legacy.prefill(64, {}, "grid"), /no prefill rows/);
  const none = LatencyPredictor.fromArtifacts([a], { regimes: ["fake_fallback"] });
  assert.throws(() => none.decode(1, 64, "fit"), /no decode rows \(none after the regime filter\)/);
  assert.equal(real.regimes("decode"), ["real_kv"]);
});

test("library rows use the timed step's sums, the upper median, and skip nothing measured", () => {
  const a = syntheticArtifact([{
    point: decodePoint(2, 100),
    regime: "real_kv",
    walls: [0.003, 0.001, 0.002],
  }], {
    skipped: [{ point: decodePoint(4, 8), reason: "fake_prefix_miss" }],
  });
  const rows = libraryRows([a]);
  assert.equal(rows.length, 1);
  assert.equal([rows[0].batch, rows[0].kv, rows[0].medianOf], [2, 100, 3]);
  assert.ok(Math.abs(rows[0].wallMs - 2) < 1e-12);
  assert.equal(rows[0].sampleWallsMs.length, 3);
});

test("served steps map onto the library: decode-only, prefill-only, and mixed as a prefill of all tokens", () => {
  const p = LatencyPredictor.fromArtifacts([syntheticArtifact(library())]);
  const base = { num_preempted: 0, num_block_copies: 0 };
  const decode = p.step({
    ...base,
    num_requests: 4,
    num_scheduled_tokens: 4,
    num_prefill_requests: 0,
    sum_prefill_tokens: 0,
    sum_prefill_kv_tokens: 0,
    num_decode_requests: 4,
    sum_decode_kv_tokens: 256,
  }, "grid");
  assert.equal(decode.kind, "decode");
  const mixed = p.step({
    ...base,
    num_requests: 3,
    num_scheduled_tokens: 130,
    num_prefill_requests: 1,
    sum_prefill_tokens: 128,
    sum_prefill_kv_tokens: 0,
    num_decode_requests: 2,
    sum_decode_kv_tokens: 0,
  }, "fit");
  assert.equal(mixed.kind, "prefill");
  assert.ok(Math.abs(mixed.wallMs - 1000 * prefillS(130)) < 1e-6);
});

test("LadderGrid merges duplicates by median and reports empty grids", () => {
  const g = new LadderGrid([{ outer: 1, inner: 1, value: 1 }, { outer: 1, inner: 1, value: 5 }, {
    outer: 1,
    inner: 1,
    value: 2,
  }]);
  assert.equal(g.at(1, 1), { value: 2 });
  assert.equal(g.size, 1);
  assert.ok("outside" in new LadderGrid([]).at(1, 1));
});

test.run();
