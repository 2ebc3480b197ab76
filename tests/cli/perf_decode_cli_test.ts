/**
 * perf-decode on the tiny fixture: each (batch, ctx) point timed after the warm-up; the JSON
 * carries every point with its GPU, wall and roofline time, its decode attention's split plan,
 * and the PyTorch figure of a --peer file with where it came from.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { runTask } from "./cli_run.ts";

test("perf-decode times each point, names its attention's split plan and labels the peer's figures", () => {
  const { dir } = ensureFixture("tiny-qwen3-moe");
  const out = mkdtempSync(join(tmpdir(), "perf-decode-"));
  try {
    const json = join(out, "decode.json");
    const peer = join(out, "peer-decode.json");
    writeFileSync(peer, JSON.stringify({ points: [{ batch: 2, ctx: 40, graph_ms: 5.5 }] }));
    const r = runTask("perf_decode", [
      ...["--model", dir, "--batch", "1,2", "--ctx", "16,40", "--steps", "3", "--warmup", "1"],
      ...["--warmup-s", "0.2", "--json", json, "--peer", peer],
    ]);
    assert.is(r.code, 0, r.stderr);
    assert.match(r.stdout, /^2 x 40 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+x/m);
    assert.match(r.stdout, /2 x 40: GPU [\d.]+ ms.*attention \S+, splits of \d+ keys x \d+\)/);
    const points = JSON.parse(readFileSync(json, "utf8")).points;
    assert.equal(points.map((p: { batch: number; ctx: number }) => [p.batch, p.ctx]), [
      [1, 16],
      [2, 16],
      [1, 40],
      [2, 40],
    ]);
    for (const p of points) {
      assert.ok(p.gpu_ms > 0 && p.roofline_ms > 0, JSON.stringify(p));
      assert.match(p.decode_attention, /^\S+ \d+x\d+$/, JSON.stringify(p));
      // each split covers at least one key of the context: splits x keys >= ctx
      const [keys, splits] = p.decode_attention.split(" ")[1].split("x").map(Number);
      assert.ok(keys * splits >= p.ctx, JSON.stringify(p));
    }
    const measured = points.find((p: { batch: number; ctx: number }) =>
      p.batch === 2 && p.ctx === 40
    );
    assert.is(measured.torch_graph_ms, 5.5);
    assert.is(measured.torch_source, `measured: ${peer}`);
    assert.is(points[0].torch_graph_ms, null, "no peer figure and no GPU.md one at 1 x 16");
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("perf-decode --stage-costs times the step with each of its stages repeated in turn", () => {
  const { dir } = ensureFixture("tiny-qwen3-moe");
  const out = mkdtempSync(join(tmpdir(), "perf-decode-"));
  try {
    const json = join(out, "decode.json");
    const r = runTask("perf_decode", [
      ...["--model", dir, "--batch", "2", "--ctx", "16", "--steps", "3", "--warmup", "1"],
      ...["--warmup-s", "0", "--json", json, "--stage-costs", "2x24"],
    ]);
    assert.is(r.code, 0, r.stderr);
    assert.match(r.stdout, /stage costs at 2 x 24 \(each stage's dispatches issued twice/);
    assert.match(r.stdout, /^linear qkv +\d+ +-?[\d.]+ +-?[\d.]+ +-?[\d.]+%/m);
    const [sc] = JSON.parse(readFileSync(json, "utf8")).stage_costs;
    assert.equal([sc.batch, sc.ctx], [2, 24]);
    assert.is(sc.base_gpu_ms.length, 2);
    const sum = sc.stages.reduce((a: number, s: { us_step: number }) => a + s.us_step, 0);
    assert.ok(Math.abs(sc.stages_sum_us - sum) < 0.01 * sc.stages.length, `${sc.stages_sum_us}`);
    assert.match(r.stdout, /the stages add up to -?[\d.]+ of the step's [\d.]+ ms \(-?\d+%\)/);
    const stages = sc.stages.map((s: { stage: string }) => s.stage);
    for (const s of ["linear qkv", "paged_attention_decode", "moe gate_up", "sample"]) {
      assert.ok(stages.includes(s), `${s} in ${stages}`);
    }
    for (const s of sc.stages) {
      assert.ok(s.gpu_ms > 0 && Number.isFinite(s.us_step), JSON.stringify(s));
    }
    // a stage of every layer (one dispatch each) has its figure a layer; the sampler's is a
    // step's alone (lavapipe's times are noise: only the arithmetic is checked)
    const qkv = sc.stages.find((s: { stage: string }) => s.stage === "linear qkv");
    assert.ok(Math.abs(qkv.us_layer * qkv.dispatches - qkv.us_step) < 1e-2, JSON.stringify(qkv));
    assert.is(sc.stages.find((s: { stage: string }) => s.stage === "sample").us_layer, null);
    assert.is(sc.method, "repeat");
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("perf-decode --stage-method both times the step without each stage too", () => {
  const { dir } = ensureFixture("tiny-qwen3-moe");
  const out = mkdtempSync(join(tmpdir(), "perf-decode-"));
  try {
    const json = join(out, "decode.json");
    const r = runTask("perf_decode", [
      ...["--model", dir, "--batch", "2", "--ctx", "16", "--steps", "3", "--warmup", "1"],
      ...["--warmup-s", "0", "--json", json, "--stage-costs", "2x16", "--stage-method", "both"],
    ]);
    assert.is(r.code, 0, r.stderr);
    assert.match(r.stdout, /stage costs at 2 x 16 \(the step as it is, less the step without/);
    assert.match(r.stdout, /the rest no stage's absence shows/);
    const rows = JSON.parse(readFileSync(json, "utf8")).stage_costs;
    assert.equal(rows.map((x: { method: string }) => x.method), ["repeat", "drop"]);
    const [repeat, drop] = rows;
    assert.equal(
      drop.stages.map((s: { stage: string }) => s.stage),
      repeat.stages.map((s: { stage: string }) => s.stage),
    );
    // a dropped stage's step is the step less its time: us_step = (base - gpu_ms) x 1000
    const base = (drop.base_gpu_ms[0] + drop.base_gpu_ms[1]) / 2;
    for (const s of drop.stages) {
      assert.ok(Math.abs((base - s.gpu_ms) * 1e3 - s.us_step) < 2, JSON.stringify(s));
    }
    const bad = runTask("perf_decode", ["--stage-method", "twice"]);
    assert.is(bad.code, 2);
    assert.match(bad.stderr, /--stage-method/);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("perf-decode refuses a --stage-costs point that is not BATCHxCTX", () => {
  const r = runTask("perf_decode", ["--stage-costs", "8by1024"]);
  assert.is(r.code, 2);
  assert.match(r.stderr, /--stage-costs/);
});

test.run();
