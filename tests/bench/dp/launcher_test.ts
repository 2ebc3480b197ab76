/**
 * The `--dp N` launcher as a process: it moves an earlier run's files aside before its ranks
 * start, ends with the signal that stopped its ranks, and its ranks do not outlive it.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import type { BenchArtifact } from "../../../src/bench/artifact.ts";
import { mergedOutPath, rankOutPath } from "../../../src/bench/dp/rank_out_path.ts";
import { runGroup } from "./group_harness.ts";
import { SMALL_ENGINE } from "../small_engine.ts";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const deno = join(root, "node_modules", "deno", "deno");

interface Run {
  readonly child: ChildProcess;
  readonly exit: Promise<{ code: number | null; signal: string | null }>;
  output(): string;
}

function start(args: readonly string[], env: Record<string, string> = {}): Run {
  const child = spawn(deno, args, {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, INIT_CWD: root, ...env },
  });
  let text = "";
  child.stdout!.on("data", (d) => (text += d));
  child.stderr!.on("data", (d) => (text += d));
  const exit = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal }))
  );
  return { child, exit, output: () => text };
}

/** `deno task bench --dp 2` with `args` after it (the launcher and its two ranks). */
function startBenchDp2(args: readonly string[]): Run {
  return start(["run", "-A", "--v8-flags=--expose-gc", "src/cli/bench.ts", "--dp", "2", ...args]);
}

async function until(what: string, ok: () => boolean, seconds: number): Promise<void> {
  const end = performance.now() + seconds * 1000;
  while (!ok()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The pids whose parent is `ppid` (read from /proc). */
function childrenOf(ppid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) === ppid) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/** A fake rank: records its pid, exits 143 on SIGTERM and 130 on SIGINT as bench.ts does. */
const FAKE_RANK = `
const dir = Deno.env.get("S47_DIR");
const rank = Deno.args[Deno.args.indexOf("--dp-rank") + 1];
Deno.addSignalListener("SIGTERM", () => Deno.exit(143));
Deno.addSignalListener("SIGINT", () => Deno.exit(130));
Deno.writeTextFileSync(dir + "/rank" + rank + ".pid", String(Deno.pid));
await new Promise((r) => setTimeout(r, 60000));
`;

/** A launcher process running launchRanks over FAKE_RANK. */
function fakeLauncher(dir: string): Run {
  const fake = join(dir, "fake_rank.ts");
  writeFileSync(fake, FAKE_RANK);
  const driver = join(dir, "driver.ts");
  writeFileSync(
    driver,
    `import process from "node:process";
import { launchRanks } from ${JSON.stringify(join(root, "src/cli/bench_launcher.ts"))};
process.argv[1] = ${JSON.stringify(fake)};
const out = ${JSON.stringify(join(dir, "o.json"))};
const code = await launchRanks({ argv: ["--out", out], size: 2, out, timeoutSeconds: 5, log: (l) => console.error(l) });
process.exit(code);
`,
  );
  return start(["run", "-A", "--config", join(root, "deno.json"), driver], { S47_DIR: dir });
}

test("ranks that die before their first write do not get the previous run's files merged as this run's", async () => {
  // a previous, complete run with the same --out
  const g = await runGroup(2, {
    schema_version: 1,
    decode: [{ batch_size: 2, total_kv_read_tokens: 20 }],
    prefill: [],
  });
  const merged = mergedOutPath(g.out);
  assert.ok(!existsSync(merged));
  // this run: every rank fails at start-up (exit 2) before it moves its old file aside
  const run = startBenchDp2([
    "--model",
    "synthetic:qwen3-30b-a3b",
    "--dp-gpus",
    "not-a-pci-address",
    "--out",
    g.out,
  ]);
  const { code } = await run.exit;
  assert.is(code, 2, run.output());
  const view = existsSync(merged)
    ? JSON.parse(readFileSync(merged, "utf8")) as BenchArtifact
    : null;
  assert.ok(
    view === null || view.status === "failed",
    `both ranks exited 2 and wrote nothing, but the launcher wrote ${merged} with status ` +
      `${view?.status} (${view?.results.length} points, run_id ${view?.run_id}: the earlier ` +
      `run's); output:\n${run.output()}`,
  );
  // the earlier run's files are kept aside, not lost
  for (const r of [0, 1]) assert.ok(existsSync(`${rankOutPath(g.out, r)}.prev`));
});

test("SIGTERM forwarded to the ranks (each exits 143) ends the launcher with 143, not 1", async () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-s47e-term-"));
  const run = fakeLauncher(dir);
  try {
    await until(
      "both ranks",
      () => existsSync(join(dir, "rank0.pid")) && existsSync(join(dir, "rank1.pid")),
      60,
    );
    process.kill(run.child.pid!, "SIGTERM");
    const { code } = await run.exit;
    assert.ok(run.output().includes("rank 0 exited with 143"), run.output());
    assert.ok(run.output().includes("rank 1 exited with 143"), run.output());
    assert.is(code, 143, `every rank exited 143 (SIGTERM) but the launcher exited ${code}`);
  } finally {
    for (const r of [0, 1]) {
      const f = join(dir, `rank${r}.pid`);
      if (existsSync(f)) {
        const pid = Number(readFileSync(f, "utf8"));
        if (alive(pid)) process.kill(pid, "SIGKILL");
      }
    }
  }
});

test("ranks do not outlive a launcher that was killed (SIGKILL)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-s47e-orphan-"));
  const out = join(dir, "o.json");
  const run = startBenchDp2([
    ...SMALL_ENGINE,
    "--out",
    out,
  ]);
  let ranks: number[] = [];
  try {
    await until(
      "both ranks loading",
      () => /\[rank 0\] model: /.test(run.output()) && /\[rank 1\] model: /.test(run.output()),
      120,
    );
    ranks = childrenOf(run.child.pid!);
    assert.is(ranks.length, 2, `the launcher's children: ${ranks}`);
    process.kill(run.child.pid!, "SIGKILL");
    await run.exit;
    await sleep(3000);
    const left = ranks.filter(alive);
    assert.equal(
      left,
      [],
      `rank processes ${left} still run 3 s after their launcher was killed (they go on ` +
        `to finish the sweep, holding the GPU and rank 0's port)`,
    );
  } finally {
    for (const pid of ranks) if (alive(pid)) process.kill(pid, "SIGKILL");
    if (alive(run.child.pid!)) process.kill(run.child.pid!, "SIGKILL");
  }
});

test.run();
