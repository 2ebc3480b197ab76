/**
 * The tasks' usage contract (README "Tasks"): bad usage or input is exit 2 with an `error:`
 * line naming it and no stack trace, found before the work where it can be; options do what
 * --help says; outputs go to folders made for them, atomically. The GPU ones run the tiny
 * fixture at the smallest shapes (a few seconds on lavapipe).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { ROOT, runTask } from "./cli_run.ts";
import { SafetensorsWriter } from "../../src/model/safetensors_writer.ts";
import { ensureFixture } from "../../scripts/fixtures.ts";

const dir = mkdtempSync(join(tmpdir(), "webfpm-task-usage-"));
const tiny = ensureFixture("tiny-qwen3-moe").dir;

/** Runs a scripts/ entry point as its deno task does. */
function runScript(
  file: string,
  args: readonly string[],
): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(`${ROOT}node_modules/.bin/deno`, ["run", "-A", file, ...args], {
    cwd: ROOT,
    encoding: "utf8",
    env: { ...process.env, INIT_CWD: ROOT },
    maxBuffer: 64 * 2 ** 20,
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** Exit 2 with an `error:` line and no stack trace. */
function usageExit(r: { code: number; stdout: string; stderr: string }, what: RegExp): void {
  const out = r.stdout + r.stderr;
  assert.is(r.code, 2, `exit ${r.code}\n${out.slice(-2000)}`);
  assert.not.match(out, /\n\s+at .*[:(]\d+:\d+/, `a stack trace:\n${out.slice(-2000)}`);
  assert.match(out, what);
}

/** perf-decode on the tiny fixture at one short point (a few seconds on lavapipe). */
const PERF_DECODE = [
  "--model",
  tiny,
  "--ctx",
  "16",
  "--steps",
  "3",
  "--warmup",
  "1",
  "--warmup-s",
  "0",
  "--bandwidth-gbps",
  "100",
];
/** perf-prefill on the tiny fixture at one short shape. */
const PERF_PREFILL = [
  "--model",
  tiny,
  "--shapes",
  "1x16",
  "--max-num-tokens",
  "64",
  "--warmup-s",
  "0",
  "--reps",
  "1",
];

// --- perf-prefill / perf-decode -----------------------------------------------------------

test("perf-prefill: a --peer file without a points array is exit 2 naming --peer", () => {
  const peer = join(dir, "peer.json");
  writeFileSync(peer, "{}\n");
  const r = runTask("perf_prefill", [...PERF_PREFILL, "--peer", peer]);
  usageExit(r, /--peer/);
});

test("perf-decode: a --profile point the KV pool cannot hold is exit 2 before the sweep", () => {
  const json = join(dir, "pd.json");
  const r = runTask("perf_decode", [
    ...PERF_DECODE,
    "--batch",
    "1",
    "--kv-cache-gb",
    "0.01",
    "--profile",
    "64x4000",
    "--json",
    json,
  ]);
  // refused once the model's pool is known, before the sweep's GPU work
  usageExit(r, /--profile 64x4000: 64 x 4000 needs \d+ KV blocks/);
  assert.not.ok(existsSync(json));
});

test("perf-decode: an empty --batch list is exit 2, not a run that measures nothing", () => {
  const r = runTask("perf_decode", [...PERF_DECODE, "--batch="]);
  usageExit(r, /--batch/);
});

test("perf-decode: duplicate --batch values are exit 2 (the point would be measured twice)", () => {
  const r = runTask("perf_decode", [...PERF_DECODE, "--batch", "1,1"]);
  usageExit(r, /--batch/);
});

test("perf-prefill: --profile-json without --profile is exit 2, not silently ignored", () => {
  const r = runTask("perf_prefill", [...PERF_PREFILL, "--profile-json", join(dir, "prof.json")]);
  usageExit(r, /--profile/);
});

// --- validate --------------------------------------------------------------------------------

test("validate: an unknown --variant is exit 2 naming it, not 0 of 0 rows passing", () => {
  const r = runTask("validate", ["--kernel", "rmsnorm", "--variant", "f99"]);
  usageExit(r, /f99/);
});

test("a positional argument a task does not take is exit 2 (validate rmsnorm)", () => {
  // the user forgot --kernel: today every kernel runs (here none, through --max-bytes 0)
  const r = runTask("validate", ["--max-bytes", "0", "rmsnorm"]);
  usageExit(r, /rmsnorm/);
});

// --- profile ---------------------------------------------------------------------------------

const PROFILE = ["--model", tiny, "--batch", "1", "--steps", "1"];

test("profile: --ctx 0 (the option's minimum) on a decode profile is exit 2, no stack", () => {
  const r = runTask("profile", [...PROFILE, "--ctx", "0", "--bandwidth-gbps", "10"]);
  usageExit(r, /--ctx/);
});

test("profile: --bandwidth-gbps 0 is refused as usage (exit 2), not a crash after the work", () => {
  const r = runTask("profile", [...PROFILE, "--ctx", "8", "--bandwidth-gbps", "0"]);
  usageExit(r, /--bandwidth-gbps/);
});

test("profile: --json in a folder that does not exist is written there", () => {
  const json = join(dir, "no-such-folder", "p.json");
  const r = runTask("profile", [
    ...PROFILE,
    "--ctx",
    "8",
    "--bandwidth-gbps",
    "10",
    "--json",
    json,
  ]);
  assert.is(r.code, 0, r.stderr);
  assert.ok(JSON.parse(readFileSync(json, "utf8")).summary.rows.length > 0);
});

// --- trace-gen / replay ----------------------------------------------------------------------

test("trace-gen: --tokenizer DIR without tokenizer.json is exit 2 naming it", () => {
  const r = runTask("trace_gen", ["--out", join(dir, "t.jsonl"), "--tokenizer", dir]);
  usageExit(r, /tokenizer/);
});

test("trace-gen: --out in a folder that does not exist is written there", () => {
  const out = join(dir, "no-such-folder-2", "t.jsonl");
  const r = runTask("trace_gen", ["--out", out, "--requests", "2", "--prompt-max", "32"]);
  assert.is(r.code, 0, r.stderr);
  assert.ok(existsSync(out));
});

/** A two-request trace from trace-gen (short prompts). */
function smallTrace(): string {
  const path = join(dir, "small.jsonl");
  if (!existsSync(path)) {
    const r = runTask("trace_gen", [
      "--out",
      path,
      "--requests",
      "2",
      "--prompt-max",
      "32",
      "--output-max",
      "4",
    ]);
    assert.is(r.code, 0, r.stderr);
  }
  return path;
}

test("replay: --out in a folder that does not exist is written there", () => {
  const out = join(dir, "no-such-folder-3", "steps.jsonl");
  const r = runTask("replay", [
    "--model",
    tiny,
    "--trace",
    smallTrace(),
    "--out",
    out,
    "--warmup",
    "off",
  ]);
  assert.is(r.code, 0, r.stderr);
  assert.ok(existsSync(out));
});

test("replay: a trace of no requests is exit 2 before any output is written", () => {
  const header = readFileSync(smallTrace(), "utf8").split("\n")[0]
    .replace(/"requests":\d+/, '"requests":0');
  const trace = join(dir, "empty.jsonl");
  writeFileSync(trace, header + "\n");
  const out = join(dir, "empty-steps.jsonl");
  const r = runTask("replay", ["--model", tiny, "--trace", trace, "--out", out, "--warmup", "off"]);
  usageExit(r, /request/);
  assert.not.ok(existsSync(out), "a header-only step log was left behind");
});

// --- logits-diff -----------------------------------------------------------------------------

test("logits-diff: --min-argmax-agree above 1 is exit 2 (the help says 0-1)", () => {
  const path = join(dir, "l.safetensors");
  const ids = Int32Array.from([1, 2, 3]);
  const logits = Float32Array.from({ length: 3 * 8 }, (_, i) => (i * 37) % 11);
  const w = SafetensorsWriter.create(path, [
    { name: "logits", dtype: "F32", shape: [3, 8] },
    { name: "token_ids", dtype: "I32", shape: [3] },
  ], { format: "pt" });
  w.write(new Uint8Array(logits.buffer));
  w.write(new Uint8Array(ids.buffer));
  w.close();
  // identical files: every argmax agrees, yet today this exits 1 "outside the bound"
  const r = runTask("logits_diff", [path, path, "--min-argmax-agree", "5"]);
  usageExit(r, /--min-argmax-agree/);
});

// --- scripts/ task entry points --------------------------------------------------------------

test("kvwarm-evidence: usage errors are exit 2 without a stack, help names the task", () => {
  const out = mkdtempSync(join(dir, "kv-"));
  usageExit(runScript("scripts/kvwarm_evidence.ts", ["--out-dir", out]), /--regime/);
  usageExit(runScript("scripts/kvwarm_evidence.ts", ["--bogus"]), /--bogus/);
  usageExit(runScript("scripts/kvwarm_evidence.ts", ["--compare", "--out-dir", out]), /--compare/);
  const help = runScript("scripts/kvwarm_evidence.ts", ["--help"]);
  assert.match(help.stdout, /usage: deno task kvwarm-evidence /);
});

test("fixtures: --help and an unknown fixture name are not uncaught errors", () => {
  const help = runScript("scripts/fixtures.ts", ["--help"]);
  assert.is(help.code, 0, help.stderr.slice(-1500));
  usageExit(runScript("scripts/fixtures.ts", ["no-such-fixture"]), /no-such-fixture/);
});

test("node-build: an unknown --task is exit 2 naming it, not a build of nothing", () => {
  usageExit(runScript("scripts/node_build.ts", ["--task", "no-such-task"]), /no-such-task/);
});

test.run();
