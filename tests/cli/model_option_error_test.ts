/**
 * A model option the model cannot take ends a task with its message, exit code 2 and no stack
 * trace (ModelOptionError through runCli), on any adapter.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { runTask } from "./cli_run.ts";

const STACK_LINE = /^\s+at /m;

test("perf-decode refuses expert tiles on a dense model by name, without a stack trace", () => {
  const { dir } = ensureFixture("tiny-qwen3");
  const r = runTask("perf_decode", [
    ...["--model", dir, "--batch", "1", "--ctx", "16", "--moe-expert-tiles"],
  ]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /error: moeExpertTiles: .* has no MoE layers/);
  assert.not.match(r.stderr, STACK_LINE);
});

test("perf-prefill refuses a split-K bound that is not a multiple of 64, without a stack trace", () => {
  const { dir } = ensureFixture("tiny-qwen3-moe");
  const r = runTask("perf_prefill", [
    ...["--model", dir, "--shapes", "1x8", "--tensor-core-split-min-k", "100"],
  ]);
  assert.is(r.code, 2, r.stderr);
  assert.match(
    r.stderr,
    /error: model: tensorCoreSplitMinK = 100 must be a positive multiple of 64/,
  );
  assert.not.match(r.stderr, STACK_LINE);
});

test("perf-decode names an LM head form that is no gemm_tc form, and a table out of order", () => {
  const { dir } = ensureFixture("tiny-qwen3-moe");
  const base = ["--model", dir, "--batch", "1", "--ctx", "16"];
  const r = runTask("perf_decode", [...base, "--lm-head-forms", "16:tcs16x1w96"]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /error: model: lmHeadForms 'f16-tcs16x1w96' is no gemm_tc form \(/);
  assert.not.match(r.stderr, STACK_LINE);
  const order = runTask("perf_decode", [...base, "--lm-head-forms", "32:tcs32x2,16:tcs16"]);
  assert.is(order.code, 2, order.stderr);
  assert.match(order.stderr, /--lm-head-forms: '16:tcs16' is not ROWS:FORM with ROWS a positive/);
  assert.not.match(order.stderr, STACK_LINE);
});

test.run();
