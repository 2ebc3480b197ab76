/**
 * `deno task logits-diff` and compareLogitsFiles: the figures are the ones a direct computation
 * gives (over more rows than one read), a bound given makes the exit code 1, and files of
 * different prompts or shapes are refused with exit code 2 naming the problem.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SafetensorsWriter } from "../../src/model/safetensors_writer.ts";
import { compareLogitsFiles } from "../../src/model/logits_compare.ts";
import { Rng } from "../../src/util/rng.ts";
import { runTask } from "./cli_run.ts";

const dir = mkdtempSync(join(tmpdir(), "webfpm-logits-diff-"));
const TOKENS = 37; // more than one 16-row read
const VOCAB = 50;

function write(name: string, logits: Float32Array, ids: Int32Array, vocab = VOCAB): string {
  const path = join(dir, name);
  const w = SafetensorsWriter.create(path, [
    { name: "logits", dtype: "F32", shape: [ids.length, vocab] },
    { name: "token_ids", dtype: "I32", shape: [ids.length] },
  ], { format: "pt" });
  w.write(new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
  w.write(new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength));
  w.close();
  return path;
}

const ids = Int32Array.from({ length: TOKENS }, (_, i) => 100 + i);
const a = Rng.fromSeed("logits-diff/a").fillNormal(new Float32Array(TOKENS * VOCAB));
const b = a.map((x, i) => x + ((i % 7) - 3) * 1e-3);
// position 20: b's argmax moves to another token
const row = 20 * VOCAB;
const top = a.subarray(row, row + VOCAB).reduce((m, x, i, r) => (x > r[m] ? i : m), 0);
b[row + ((top + 1) % VOCAB)] = a[row + top] + 1;
const pathA = write("a.safetensors", a, ids);
const pathB = write("b.safetensors", b, ids);

test("the comparison's figures equal a direct computation over every row", () => {
  const d = compareLogitsFiles(pathA, pathB);
  let sum = 0, max = 0, maxAt = 0, mean = 0;
  for (let i = 0; i < a.length; i++) {
    const diff = Math.abs(a[i] - b[i]);
    sum += diff;
    if (diff > max) [max, maxAt] = [diff, i];
    mean += b[i];
  }
  mean /= b.length;
  const std = Math.sqrt(b.reduce((s, y) => s + (y - mean) ** 2, 0) / b.length);
  assert.equal([d.tokens, d.vocab], [TOKENS, VOCAB]);
  assert.ok(Math.abs(d.meanAbsDiff - sum / a.length) < 1e-9, `${d.meanAbsDiff}`);
  assert.ok(Math.abs(d.maxAbsDiff - max) < 1e-9);
  assert.equal(d.maxAt, { position: Math.floor(maxAt / VOCAB), tokenId: maxAt % VOCAB });
  assert.ok(Math.abs(d.stdB - std) < 1e-6, `${d.stdB} vs ${std}`);
  assert.equal([d.argmaxAgree, d.argmaxDiffer], [TOKENS - 1, [20]]);
  assert.is(d.nonFinitePositions, 0);
  const same = compareLogitsFiles(pathA, pathA);
  assert.equal([same.meanAbsDiff, same.maxAbsDiff, same.argmaxAgree], [0, 0, TOKENS]);
});

test("logits-diff prints the figures, writes JSON, and exits 1 only outside a bound given", () => {
  const json = join(dir, "diff.json");
  const ok = runTask("logits_diff", [pathA, pathB, "--json", json]);
  assert.is(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /37 positions x 50: mean \|a - b\| /);
  assert.match(ok.stdout, /argmax equal at 36 of 37 positions \(differs at 20\)/);
  const j = JSON.parse(readFileSync(json, "utf8"));
  assert.equal([j.tokens, j.argmaxAgree, j.argmaxDiffer], [37, 36, [20]]);
  const strict = runTask("logits_diff", [pathA, pathB, "--min-argmax-agree", "1"]);
  assert.is(strict.code, 1);
  assert.match(strict.stderr, /argmax agreement 0\.9730 < 1/);
  assert.is(runTask("logits_diff", [pathA, pathB, "--min-argmax-agree", "0.9"]).code, 0);
  assert.is(runTask("logits_diff", [pathA, pathB, "--max-mean-abs", "1e-9"]).code, 1);
});

test("files of different prompts or shapes, and missing files, are refused with exit code 2", () => {
  const otherIds = ids.slice();
  otherIds[5] = 7;
  const other = write("other.safetensors", a, otherIds);
  const r1 = runTask("logits_diff", [pathA, other]);
  assert.is(r1.code, 2);
  assert.match(r1.stderr, /not the same prompt .*token ids differ at position 5/);
  const narrow = write("narrow.safetensors", a.subarray(0, TOKENS * 10), ids, 10);
  const r2 = runTask("logits_diff", [pathA, narrow]);
  assert.is(r2.code, 2);
  assert.match(r2.stderr, /logits are \[37, 10\], .* has \[37, 50\]/);
  const r3 = runTask("logits_diff", [pathA, join(dir, "missing.safetensors")]);
  assert.is(r3.code, 2);
  assert.ok(!existsSync(join(dir, "missing.safetensors")));
  assert.is(runTask("logits_diff", [pathA]).code, 2);
});

test.run();
