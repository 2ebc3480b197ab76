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

test.run();
