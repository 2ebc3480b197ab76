/**
 * `replay` serves a small trace on the tiny MoE fixture (lavapipe in CI) and logs every
 * step: the steps account for every prompt and output token, each step's kind follows
 * from its sums, and the summary says every request finished at its length.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { ModelTokenizer } from "../../src/model/tokenizer.ts";
import { formatRequestTrace } from "../../src/report/request_trace.ts";
import { parseServedSteps, stepKind } from "../../src/report/served_steps.ts";
import { generateTrace } from "../../src/report/trace_generator.ts";
import { runTask } from "./cli_run.ts";

const TEXT = `The committee met on Tuesday to review the budget for the coming year.
Several members asked whether the new library wing could be finished before winter,
and the architect answered that the roof would be closed by the end of October.
A long discussion followed about parking, the bus schedule, and the price of heating oil.`;

test("replay serves every trace request and logs steps that account for all their tokens", async () => {
  const { dir } = await ensureFixture("tiny-qwen3-moe");
  const tokenizer = ModelTokenizer.fromDir(dir);
  const ids = tokenizer.encode(TEXT.repeat(4));
  const trace = generateTrace({
    tokens: ids,
    decode: (w) => tokenizer.decode(w),
    corpus: { name: "test text", sha256: "-", documents: 1, tokenizer: dir },
  }, {
    requests: 3,
    seed: "replay-test",
    rateRps: 20,
    promptMedian: 12,
    promptSigma: 0.3,
    promptMax: 20,
    outputMedian: 3,
    outputSigma: 0.2,
    outputMin: 2,
    outputMax: 4,
  });
  const work = mkdtempSync(join(tmpdir(), "webfpm-replay-"));
  const tracePath = join(work, "trace.jsonl"), out = join(work, "steps.jsonl");
  writeFileSync(tracePath, formatRequestTrace(trace));
  const r = runTask("replay", [
    "--model",
    dir,
    "--trace",
    tracePath,
    "--out",
    out,
    "--prefix-caching",
    "off",
    "--max-num-tokens",
    "64",
  ]);
  assert.is(r.code, 0, r.stderr);
  const log = parseServedSteps(readFileSync(out, "utf8"), out);
  assert.equal(log.header.trace.requests, 3);
  assert.equal(log.summary?.finished, { length: 3 });
  assert.equal(log.summary?.steps, log.steps.length);
  // re-tokenized prompts keep their length (prompt_length_mismatches counts any change)
  const prompts = trace.requests.reduce((s, q) => s + q.prompt_tokens, 0);
  const outputs = trace.requests.reduce((s, q) => s + q.max_tokens, 0);
  const mismatched = log.summary!.prompt_length_mismatches;
  const scheduled = log.steps.reduce((s, x) => s + x.num_scheduled_tokens, 0);
  if (mismatched === 0) {
    // each request computes its prompt, then one token per output but the last
    assert.is(scheduled, prompts + outputs - 3);
  }
  assert.is(log.steps.reduce((s, x) => s + x.num_preempted, 0), 0);
  assert.ok(log.steps.some((s) => stepKind(s) !== "decode"), "some step prefills");
  assert.ok(log.steps.some((s) => stepKind(s) === "decode"), "some step only decodes");
  for (const s of log.steps) {
    assert.ok(s.interval_ms <= s.wall_ms + 1e-6, `step ${s.step_id}: interval beyond wall`);
    assert.is(s.num_requests, s.num_prefill_requests + s.num_decode_requests);
  }
  const ids2 = log.steps.map((s) => s.step_id);
  assert.equal(ids2, [...ids2].sort((a, b) => a - b), "steps are logged in order");
});

test("replay names a trace it cannot read, before loading any model", () => {
  const work = mkdtempSync(join(tmpdir(), "webfpm-replay-"));
  const bad = join(work, "bad.jsonl");
  writeFileSync(bad, '{"kind":"request"}\n');
  const r = runTask("replay", [
    "--model",
    "synthetic:qwen3-30b-a3b",
    "--trace",
    bad,
    "--out",
    join(work, "o"),
  ]);
  assert.is(r.code, 2);
  assert.match(r.stderr, /bad\.jsonl:1: the first line must be the trace_header/);
});

test.run();
