/**
 * Ranks in separate processes (`deno run -A tests/dp/rank_process.ts`), talking over
 * real ZeroMQ TCP sockets on 127.0.0.1; the test process is one of the ranks.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { DpError } from "../../src/dp/dp_error.ts";
import { RankSynchronizer } from "../../src/dp/rank_synchronizer.ts";
import { failureOf, freePort, identity } from "./group.ts";
import { runSweep, type SweepSummary } from "./rank_sweep.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const deno = `${root}node_modules/.bin/deno`;
const script = `${root}tests/dp/rank_process.ts`;
/** Generous for process start-up on a loaded machine; rounds use `timeoutMs`. */
const connectTimeoutMs = 60_000;
const timeoutMs = 1500;

type RankEvent = { event: string } & Record<string, unknown>;

interface RankProcess {
  readonly child: ChildProcess;
  readonly events: RankEvent[];
  readonly exited: Promise<number | null>;
  /** Resolves with the first event that matches; rejects if the process exits first. */
  waitFor(match: (e: RankEvent) => boolean): Promise<RankEvent>;
}

function spawnRank(scenario: string, rank: number, size: number, port: number): RankProcess {
  const child = spawn(deno, [
    "run",
    "-A",
    script,
    scenario,
    "--dp-rank",
    String(rank),
    "--dp-size",
    String(size),
    "--dp-master",
    `127.0.0.1:${port}`,
    "--timeout-ms",
    String(timeoutMs),
  ], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  const events: RankEvent[] = [];
  const waiters: { match: (e: RankEvent) => boolean; resolve: (e: RankEvent) => void }[] = [];
  let stderr = "";
  let pending = "";
  child.stderr!.on("data", (chunk) => stderr += chunk);
  child.stdout!.on("data", (chunk) => {
    pending += chunk;
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines.filter((l) => l.trim() !== "")) {
      const event = JSON.parse(line) as RankEvent;
      events.push(event);
      for (const w of waiters.filter((w) => w.match(event))) w.resolve(event);
    }
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    child,
    events,
    exited,
    waitFor(match) {
      const seen = events.find(match);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        waiters.push({ match, resolve });
        exited.then((code) =>
          reject(
            new Error(`rank ${rank} exited (${code}) first: ${JSON.stringify(events)} ${stderr}`),
          )
        );
      });
    },
  };
}

async function stopAll(ranks: readonly RankProcess[]): Promise<void> {
  for (const p of ranks) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
    await p.exited;
  }
}

test("three ranks, two of them separate processes, run a sweep and agree on everything", async () => {
  const rank0 = await RankSynchronizer.create(identity(0, 3, 0), { timeoutMs, connectTimeoutMs });
  const children = [1, 2].map((r) => spawnRank("sweep", r, 3, rank0.port!));
  try {
    await rank0.connect();
    const mine = await runSweep(rank0);
    const theirs = await Promise.all(children.map(async (p) => {
      const done = await p.waitFor((e) => e.event === "done");
      assert.is(await p.exited, 0);
      return done.summary as SweepSummary;
    }));
    const all = [mine, ...theirs];
    assert.equal(all.map((s) => s.capacity.usable_blocks), [800, 800, 800]);
    assert.equal(all.map((s) => s.capacity.kvwarm_skip_reason), [
      "peer_ineligible",
      "peer_ineligible",
      "flag_off",
    ]);
    for (const s of all) {
      assert.is(s.digest, "grid-v1");
      assert.equal(s.verdicts.map((v) => v.allDone), [false, false, true]);
      assert.equal(s.iterationWalls, [[0.03, 0.02], [0.03, 0.02]]);
      assert.is(s.stop, false);
      assert.is(s.barrierRounds, 3);
    }
    assert.equal(mine.gatheredRanks, [0, 1, 2]);
    assert.is(theirs[0].gatheredRanks, null);
    for (const p of children) {
      const logs = p.events.filter((e) => e.event === "log").map((e) => e.line);
      assert.equal(logs, ["stage batch=4 settled by the group (ok=true) at round 3"]);
    }
  } finally {
    rank0.close();
    await stopAll(children);
  }
});

test("a killed follower process: rank 0 and the other follower fail with an error naming it", async () => {
  const rank0 = await RankSynchronizer.create(identity(0, 3, 0), { timeoutMs, connectTimeoutMs });
  const children = [1, 2].map((r) => spawnRank("barriers", r, 3, rank0.port!));
  try {
    await rank0.connect();
    const failure = failureOf((async () => {
      for (let step = 0;; step++) await rank0.barrier(step);
    })());
    await children[1].waitFor((e) => e.event === "step" && (e.step as number) >= 20);
    children[1].child.kill("SIGKILL");
    const err = await failure;
    assert.instance(err, DpError);
    assert.equal(err.ranks, [2]);
    assert.match(err.message, /rank 2/);
    const notice = await children[0].waitFor((e) => e.event === "error");
    assert.match(notice.message as string, /^rank 0 stopped the group: .*rank 2/);
    assert.equal(notice.ranks, [2]);
    assert.is(await children[0].exited, 3);
  } finally {
    rank0.close();
    await stopAll(children);
  }
});

test("a killed rank 0 process: the follower fails with a timeout naming rank 0", async () => {
  const port = await freePort();
  const coordinator = spawnRank("barriers", 0, 2, port);
  const follower = await RankSynchronizer.create(identity(1, 2, port), {
    timeoutMs,
    connectTimeoutMs,
  });
  try {
    await follower.connect();
    let reached = 0;
    const failure = failureOf((async () => {
      for (let step = 0;; step++) {
        await follower.barrier(step);
        reached = step;
        if (step === 20) coordinator.child.kill("SIGKILL");
      }
    })());
    const err = await failure;
    assert.ok(reached >= 20);
    assert.is(err.code, "timeout");
    assert.equal(err.ranks, [0]);
    assert.match(
      err.message,
      /waiting for rank 0 \(tcp:\/\/127\.0\.0\.1:\d+\) to answer rank 1's barrier/,
    );
  } finally {
    follower.close();
    await stopAll([coordinator]);
  }
});

test.run();
