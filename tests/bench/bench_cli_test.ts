/**
 * `deno task bench` as a user meets it, spawned as a subprocess: bad manifests and
 * points the engine cannot hold exit with code 2 and leave only a `failed` artifact;
 * Ctrl-C leaves a `partial` artifact that keeps the points already measured.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import process from "node:process";
import type { BenchArtifact } from "../../src/bench/artifact.ts";
import { checkArtifact } from "../../src/bench/artifact_check.ts";
import { SMALL_ENGINE } from "./small_engine.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const deno = join(root, "node_modules", "deno", "deno");

interface Exit {
  readonly code: number | null;
  readonly stderr: string;
}

function start(args: readonly string[]): { child: ChildProcess; exit: Promise<Exit> } {
  const child = spawn(deno, ["run", "-A", "--v8-flags=--expose-gc", "src/cli/bench.ts", ...args], {
    cwd: root,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr += d));
  const exit = new Promise<Exit>((resolve) =>
    child.on("close", (code) => resolve({ code, stderr }))
  );
  return { child, exit };
}

function workdir(): string {
  return mkdtempSync(join(tmpdir(), "webfpm-bench-cli-"));
}

function manifestFile(dir: string, manifest: unknown): string {
  const path = join(dir, "points.json");
  writeFileSync(path, typeof manifest === "string" ? manifest : JSON.stringify(manifest));
  return path;
}

function read(path: string): BenchArtifact {
  return JSON.parse(readFileSync(path, "utf8"));
}

test("a bad manifest: exit code 2, every problem named by point and field, a failed artifact", async () => {
  const dir = workdir();
  const out = join(dir, "out.json");
  writeFileSync(out, JSON.stringify({ status: "complete", stale: true }));
  const points = manifestFile(dir, {
    schema_version: 1,
    prefill: [
      { batch_size: 4, total_prefill_tokens: 2, total_kv_read_tokens: 0, note: "x" },
      { batch_size: 4, total_prefill_tokens: 8, total_kv_read_tokens: 2 },
      { batch_size: 0, total_prefill_tokens: "8", total_kv_read_tokens: -16 },
    ],
    decode: [{ batch_size: 8, total_kv_read_tokens: 4 }],
  });
  const { code, stderr } = await start(["--points", points, "--out", out]).exit;
  assert.is(code, 2, stderr);
  for (
    const expected of [
      'prefill[0]: unknown field "note"',
      "prefill[1].total_kv_read_tokens: 2 is between 0 and batch_size 4",
      "prefill[2].batch_size: must be > 0, got 0",
      'prefill[2].total_prefill_tokens: must be an integer, got the string "8"',
      "prefill[2].total_kv_read_tokens: must be >= 0, got -16",
      "decode[0].total_kv_read_tokens: 4 < batch_size 8",
    ]
  ) assert.ok(stderr.includes(expected), `stderr names: ${expected}\n${stderr}`);
  const a = read(out);
  assert.equal(checkArtifact(a), []);
  assert.equal([a.status, a.stop_reason, a.valid, a.usable, a.error!.kind], [
    "failed",
    "input_error",
    false,
    false,
    "input",
  ]);
  assert.is(a.results.length, 0);
});

test("a missing manifest file and an unknown flag exit with code 2", async () => {
  const dir = workdir();
  const missing = await start(["--points", join(dir, "nope.json"), "--out", join(dir, "o.json")])
    .exit;
  assert.is(missing.code, 2);
  assert.match(missing.stderr, /nope\.json: no such file/);
  const flag = await start(["--batch", "4"]).exit;
  assert.is(flag.code, 2);
  assert.match(flag.stderr, /unknown option --batch/);
});

test("--points naming a folder, or --out naming one: exit code 2 naming the option", async () => {
  const dir = workdir();
  const folder = join(dir, "points");
  mkdirSync(folder);
  const out = join(dir, "out.json");
  const points = await start([
    "--model",
    "synthetic:qwen3-30b-a3b",
    "--points",
    folder,
    "--out",
    out,
  ])
    .exit;
  assert.is(points.code, 2, points.stderr);
  assert.not.match(points.stderr, /\n\s+at /, "no stack trace");
  assert.match(points.stderr, /--points .*points: cannot read it/);
  assert.is(read(out).status, "failed");
  const manifest = manifestFile(dir, { schema_version: 1, decode: [] });
  const outDir = await start([
    "--model",
    "synthetic:qwen3-30b-a3b",
    "--points",
    manifest,
    "--out",
    folder,
  ])
    .exit;
  assert.is(outDir.code, 2, outDir.stderr);
  assert.not.match(outDir.stderr, /\n\s+at /, "no stack trace");
  assert.match(outDir.stderr, /--out: cannot write the artifact .*points: it is a folder/);
});

test("a point the engine cannot hold: exit code 2 before anything runs, naming point and field", async () => {
  const dir = workdir();
  const out = join(dir, "out.json");
  const points = manifestFile(dir, {
    schema_version: 1,
    decode: [{ batch_size: 2, total_kv_read_tokens: 64 }, {
      batch_size: 1,
      total_kv_read_tokens: 4096,
    }],
    prefill: [{ batch_size: 8, total_prefill_tokens: 64, total_kv_read_tokens: 0 }],
  });
  const { code, stderr } = await start(["--points", points, "--out", out, ...SMALL_ENGINE]).exit;
  assert.is(code, 2, stderr);
  assert.match(
    stderr,
    /decode\[1\]\.total_kv_read_tokens \(decode:B1:K4096\): .* > max_model_len 256/,
  );
  assert.match(
    stderr,
    /prefill\[0\]\.batch_size \(prefill:B8:T64:K0\): 8 requests exceed max_num_seqs 4/,
  );
  const a = read(out);
  assert.equal(checkArtifact(a), []);
  assert.equal([a.status, a.stop_reason, a.results.length], ["failed", "input_error", 0]);
  assert.not.ok(a.engine === null, "the engine was built to check the points");
});

test("an envelope too small for the warm-up: exit code 2 before any point, naming what to raise", async () => {
  const dir = workdir();
  const out = join(dir, "out.json");
  const { code, stderr } = await start(["--kvwarm", "off", "--max-model-len", "6", "--out", out])
    .exit;
  assert.is(code, 2, stderr);
  assert.match(
    stderr,
    /warm-up: a request of 1 prompt token and 5 steps does not fit: .*max_model_len is 6; raise --max-model-len/,
  );
  const a = read(out);
  assert.equal(checkArtifact(a), []);
  assert.equal([a.status, a.stop_reason, a.results.length], ["failed", "input_error", 0]);
});

test("Ctrl-C: exit code 130 and a partial artifact that keeps the measured points", async () => {
  const dir = workdir();
  const out = join(dir, "out.json");
  const points = manifestFile(dir, {
    schema_version: 1,
    // enough points that the run outlasts the poll below after its first checkpoint (4 points
    // once ran out before the 250 ms poll saw one)
    decode: Array.from({ length: 12 }, (_, i) => ({
      batch_size: 1,
      total_kv_read_tokens: 16 * (i + 1),
    })),
  });
  const { child, exit } = start([
    "--points",
    points,
    "--out",
    out,
    "--checkpoint-every",
    "1",
    ...SMALL_ENGINE,
  ]);
  let checkpoint: BenchArtifact | null = null;
  for (let i = 0; i < 6000 && checkpoint === null; i++) {
    await sleep(50);
    if (existsSync(out)) checkpoint = read(out);
  }
  assert.ok(checkpoint, "a checkpoint appeared");
  assert.equal([checkpoint!.status, checkpoint!.stop_reason], ["partial", "checkpoint"]);
  // (Deno's child.kill() reports its own signal as the exit; signal the process directly)
  process.kill(child.pid!, "SIGINT");
  const { code, stderr } = await exit;
  assert.is(code, 130, stderr);
  const a = read(out);
  assert.equal(checkArtifact(a), []);
  assert.equal([a.status, a.stop_reason, a.valid, a.error!.kind], [
    "partial",
    "interrupted",
    true,
    "interrupted",
  ]);
  assert.ok(a.results.length >= checkpoint!.results.length && a.results.length >= 1);
  assert.ok(a.results.length < 12, "it stopped before the end");
  assert.is(a.results[0].point_key, "decode:B1:K192");
});

test.run();
