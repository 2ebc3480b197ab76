/**
 * A task's --model is checked before the GPU opens: a checkpoint that cannot be read (a
 * truncated shard, no safetensors) is bad input (exit 2, named, no stack trace), and a
 * folder without tokenizer.json takes the Qwen3 tokenizer in every task.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  closeSync,
  copyFileSync,
  ftruncateSync,
  mkdtempSync,
  openSync,
  readFileSync,
  statSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { loadModel, loadTokenizer } from "../../src/cli/model_options.ts";
import { InputError } from "../../src/cli/run_cli.ts";
import type { Gpu } from "../../src/gpu/device.ts";
import { ModelTokenizer, qwen3TokenizerJsonPath } from "../../src/model/tokenizer.ts";
import { runTask } from "./cli_run.ts";

const STACK_LINE = /^\s+at /m;

/** A copy of tiny-qwen3 (two shards) whose second shard is cut short. */
function truncatedDense(): string {
  const src = ensureFixture("tiny-qwen3").dir;
  const dir = mkdtempSync(join(tmpdir(), "webfpm-s47b-trunc-"));
  for (
    const f of [
      "config.json",
      "generation_config.json",
      "tokenizer.json",
      "tokenizer_config.json",
      "model.safetensors.index.json",
      "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors",
    ]
  ) copyFileSync(join(src, f), join(dir, f));
  const shard = join(dir, "model-00002-of-00002.safetensors");
  const fd = openSync(shard, "r+");
  ftruncateSync(fd, statSync(shard).size - 100); // an interrupted download
  closeSync(fd);
  return dir;
}

test("loadModel (replay, profile): a truncated shard is an InputError naming it, before the GPU", async () => {
  const dir = truncatedDense();
  // the checkpoint is read before the GPU is touched (dense model: no expert-tile probe)
  const gpu = { f16: false } as unknown as Gpu;
  let err: unknown = null;
  try {
    await loadModel(gpu, { model: dir, dtype: "f32" }, () => {});
  } catch (e) {
    err = e;
  }
  assert.ok(err !== null, "a truncated shard must be refused");
  assert.match((err as Error).message, /model-00002-of-00002\.safetensors/);
  assert.instance(err, InputError, `exit 1 with a stack trace: ${(err as Error).message}`);
});

test("bench --model with no safetensors: exit 2, no stack trace, a failed artifact naming it", () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-s47b-noweights-"));
  copyFileSync(join(ensureFixture("tiny-qwen3").dir, "config.json"), join(dir, "config.json"));
  const r = runTask("bench", ["--model", dir, "--out", join(dir, "bench.json")]);
  assert.match(r.stderr, /no model\.safetensors or model\.safetensors\.index\.json/);
  assert.not.match(r.stderr, STACK_LINE, r.stderr);
  assert.is(r.code, 2, r.stderr);
  const a = JSON.parse(readFileSync(join(dir, "bench.json"), "utf8"));
  assert.equal([a.status, a.error.kind], ["failed", "input"]);
  assert.match(a.error.message, /no model\.safetensors/);
});

test("replay --model with a truncated shard: exit 2 naming it, no stack trace", () => {
  const dir = truncatedDense();
  const tracePath = join(dir, "trace.jsonl");
  const gen = runTask("trace_gen", ["--out", tracePath, "--requests", "1", "--prompt-max", "16"]);
  assert.is(gen.code, 0, gen.stderr);
  const r = runTask("replay", [
    "--model",
    dir,
    "--trace",
    tracePath,
    "--out",
    join(dir, "s.jsonl"),
  ]);
  assert.match(r.stderr, /model-00002-of-00002\.safetensors/);
  assert.not.match(r.stderr, STACK_LINE, r.stderr);
  assert.is(r.code, 2, r.stderr);
});

test("loadTokenizer (replay): a folder without tokenizer.json takes the Qwen3 tokenizer, as generate does", () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-s47b-notok-"));
  const src = ensureFixture("tiny-qwen3-moe").dir;
  for (const f of ["config.json", "model.safetensors"]) copyFileSync(join(src, f), join(dir, f));
  const tok = loadTokenizer({ model: dir });
  assert.is(tok.vocabSize, ModelTokenizer.fromFile(qwen3TokenizerJsonPath()).vocabSize);
});

test.run();
