/**
 * `deno task bench --dp N`: starts N rank processes of the same command on this host,
 * rank r with `--dp-rank r --dp-size N --dp-master 127.0.0.1:PORT` (a free port unless
 * `--dp-master` names one), prefixes their output with `[rank r]`, forwards Ctrl-C, and
 * when every rank has exited merges their artifacts (`<stem>_dp<r>.json`) into
 * `<stem>_merged.json` and prints what the per-step barrier cost each rank.
 *
 * Ranks end by themselves: a rank that fails tells the others, and every wait for the
 * group has a timeout. Only if a rank is still running well after that (a rank stuck
 * outside the synchronizer) does the launcher stop it, and says so.
 *
 * ```ts
 * const code = await launchRanks({ argv, size: 2, out, timeoutSeconds: 10, log });
 * ```
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, renameSync } from "node:fs";
import { createServer } from "node:net";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  CPU_ADAPTER_DP_TIMEOUT_SECONDS,
  mergedOutPath,
  mergeRankFiles,
  rankOutPath,
  stepRoundLine,
} from "../bench/dp/mod.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { UsageError } from "./args.ts";

/** What {@link launchRanks} needs. */
export interface LaunchOptions {
  /** The command line as given (without the runtime and script). */
  readonly argv: readonly string[];
  /** Ranks to start. */
  readonly size: number;
  /** The resolved `--out` (every rank writes beside it). */
  readonly out: string;
  /** `--dp-timeout`, s: how long ranks wait for each other (default: a CPU adapter's 600 s). */
  readonly timeoutSeconds?: number;
  /** Log lines. */
  readonly log: (line: string) => void;
}

/** Ranks left running this long after another rank exited with an error are stopped, s. */
const STRAGGLER_MARGIN_S = 30;

/** A free TCP port on 127.0.0.1 (closed again; rank 0 binds it right after). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address !== null
          ? resolve(address.port)
          : reject(new Error("no port"))
      );
    });
  });
}

/**
 * The rank's command line: `argv` without `--dp`, `--out` and `--dp-master`, then `--out`
 * (resolved) and the rank flags.
 */
export function rankArgv(
  argv: readonly string[],
  rank: number,
  size: number,
  master: string,
  out: string,
): string[] {
  const dropped = new Set(["--dp", "--out", "--dp-master"]);
  const kept: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const name = arg.includes("=") ? arg.slice(0, arg.indexOf("=")) : arg;
    if (dropped.has(name)) {
      if (!arg.includes("=")) i++; // its value
      continue;
    }
    kept.push(arg);
  }
  return [
    ...kept,
    "--out",
    out,
    "--dp-rank",
    String(rank),
    "--dp-size",
    String(size),
    "--dp-master",
    master,
  ];
}

/** The runtime and flags that run `script` the way this process runs (Deno or Node). */
export function selfCommand(script: string): { command: string; args: string[] } {
  const deno = (process.versions as Record<string, string | undefined>).deno;
  return deno
    ? { command: process.execPath, args: ["run", "-A", "--v8-flags=--expose-gc", script] }
    : { command: process.execPath, args: [...process.execArgv, script] };
}

function masterOf(argv: readonly string[]): string | null {
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--dp-master") return argv[i + 1] ?? null;
    if (argv[i].startsWith("--dp-master=")) return argv[i].slice("--dp-master=".length);
  }
  return null;
}

function prefixLines(stream: NodeJS.ReadableStream, prefix: string, write: (s: string) => void) {
  let pending = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    pending += chunk;
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines) write(`${prefix}${line}\n`);
  });
  stream.on("end", () => {
    if (pending !== "") write(`${prefix}${pending}\n`);
  });
}

/** Starts the ranks, waits for all of them, merges; returns the exit code (see the module doc). */
export async function launchRanks(o: LaunchOptions): Promise<number> {
  if (!Number.isSafeInteger(o.size) || o.size < 2) {
    throw new UsageError(`--dp ${o.size}: need 2 or more`);
  }
  for (const flag of ["--dp-rank", "--dp-size"]) {
    if (o.argv.some((a) => a === flag || a.startsWith(`${flag}=`))) {
      throw new UsageError(
        `--dp N starts the ranks itself; ${flag} starts one rank by hand: give one or the other`,
      );
    }
  }
  const master = masterOf(o.argv) ?? `127.0.0.1:${await freePort()}`;
  // The entry point this process runs (src/cli/bench.ts, or a bundled build of it).
  const script = process.argv[1] ?? fileURLToPath(new URL("./bench.ts", import.meta.url));
  const { command, args } = selfCommand(script);
  o.log(`dp: starting ${o.size} ranks, rank 0 at ${master}; artifacts beside ${o.out}`);
  // an earlier run's files must not stand in for a rank that dies before its first write (nor
  // its merged view for a merge that fails): kept aside, not lost
  const earlier = [...Array(o.size).keys()].map((r) => rankOutPath(o.out, r));
  for (const path of [...earlier, mergedOutPath(o.out)]) {
    if (existsSync(path)) renameSync(path, `${path}.prev`);
  }
  const children: ChildProcess[] = [];
  const exits: Promise<{ rank: number; code: number | null; signal: string | null }>[] = [];
  for (let rank = 0; rank < o.size; rank++) {
    const child = spawn(command, [...args, ...rankArgv(o.argv, rank, o.size, master, o.out)], {
      // stdin is never written: its end (the launcher gone, however it died) stops the rank
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, WEBFPM_DP_LAUNCHED: "1", WEBFPM_DP_LOCAL_SIZE: String(o.size) },
    });
    prefixLines(child.stdout!, `[rank ${rank}] `, (s) => process.stdout.write(s));
    prefixLines(child.stderr!, `[rank ${rank}] `, (s) => process.stderr.write(s));
    children.push(child);
    exits.push(
      new Promise((resolve) =>
        child.on("close", (code, signal) => resolve({ rank, code, signal }))
      ),
    );
  }
  const running = new Set(children);
  // process.kill, not child.kill: under Deno the latter reports its own signal as the exit.
  const signal = (c: ChildProcess, name: NodeJS.Signals) => {
    try {
      process.kill(c.pid!, name);
    } catch {
      // already gone
    }
  };
  let received: NodeJS.Signals | null = null;
  const forward = (name: NodeJS.Signals) => () => {
    received ??= name;
    for (const c of running) signal(c, name);
  };
  const onInt = forward("SIGINT"), onTerm = forward("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  let straggler: ReturnType<typeof setTimeout> | null = null;
  const stopped: number[] = [];
  const results = await Promise.all(exits.map((p, rank) =>
    p.then((r) => {
      running.delete(children[rank]);
      if (r.code !== 0 && straggler === null && running.size > 0) {
        const waitS = (o.timeoutSeconds ?? CPU_ADAPTER_DP_TIMEOUT_SECONDS) * 1.25 + 2 +
          STRAGGLER_MARGIN_S;
        straggler = setTimeout(() => {
          for (const [i, c] of children.entries()) {
            if (running.has(c)) {
              stopped.push(i);
              o.log(
                `dp: rank ${i} still runs ${
                  waitS.toFixed(0)
                } s after rank ${r.rank} failed; stopping it`,
              );
              signal(c, "SIGTERM");
            }
          }
        }, waitS * 1000);
      }
      return r;
    })
  ));
  if (straggler !== null) clearTimeout(straggler);
  process.off("SIGINT", onInt);
  process.off("SIGTERM", onTerm);

  for (const r of results) {
    o.log(
      `dp: rank ${r.rank} exited with ${r.code ?? r.signal}` +
        (stopped.includes(r.rank) ? " (stopped by the launcher)" : ""),
    );
  }
  try {
    const merged = mergeRankFiles(o.out, o.size);
    const path = mergedOutPath(o.out);
    writeJsonAtomic(path, merged);
    for (const s of merged.attention_dp?.merged_ranks ?? []) {
      if (s.step_round) console.log(stepRoundLine(s.rank, s.step_round, s.idle_barrier));
    }
    console.log(
      `merged: ${merged.results.length} points measured on all ${o.size} ranks, ` +
        `${merged.skipped_points.length} skipped, status ${merged.status}`,
    );
    o.log(`bench: wrote ${path} (status ${merged.status})`);
  } catch (err) {
    o.log(`dp: no merged view: ${(err as Error).message}`);
  }
  const codes = results.map((r) => r.code ?? 1);
  if (codes.every((c) => c === 0)) return 0;
  if (codes.includes(2)) return 2;
  // stopped by a signal: the launcher's own, else the one every stopped rank reports
  if (received === "SIGINT" || codes.includes(130)) return 130;
  if (received === "SIGTERM" || codes.every((c) => c === 0 || c === 143)) return 143;
  return 1;
}
