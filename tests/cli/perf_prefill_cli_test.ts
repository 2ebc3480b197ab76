/**
 * perf-prefill on the tiny fixture: the clock warm-up, then each shape timed; the table and the
 * JSON carry every shape with its GPU and wall time.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { runTask } from "./cli_run.ts";

test("perf-prefill times each shape after the warm-up and writes them as JSON", () => {
  const { dir } = ensureFixture("tiny-qwen3-moe");
  const out = mkdtempSync(join(tmpdir(), "perf-prefill-"));
  try {
    const json = join(out, "prefill.json");
    const r = runTask("perf_prefill", [
      ...["--model", dir, "--shapes", "1x8,2x40", "--reps", "1", "--warmup-s", "0.2"],
      ...["--max-num-tokens", "64", "--json", json],
    ]);
    assert.is(r.code, 0, r.stderr);
    assert.match(r.stdout, /^1 x 8 +1 +\d/m);
    // 2 x 40 is 80 tokens: two steps of 64 tokens at most
    assert.match(r.stdout, /^2 x 40 +2 +\d/m);
    const points = JSON.parse(readFileSync(json, "utf8")).points;
    assert.equal(points.map((p: { batch: number; tokens: number }) => [p.batch, p.tokens]), [
      [1, 8],
      [2, 40],
    ]);
    for (const p of points) {
      assert.ok(p.gpu_ms > 0 && p.wall_ms >= p.gpu_ms * 0.5, JSON.stringify(p));
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("perf-prefill refuses a negative warm-up by name", () => {
  const r = runTask("perf_prefill", ["--warmup-s", "-1"]);
  assert.is(r.code, 2);
  assert.match(r.stderr, /warmup-s/);
});

test.run();
