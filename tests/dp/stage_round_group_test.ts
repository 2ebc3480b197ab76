/**
 * The stage round over real ZeroMQ sockets, ranks as separate objects in one process.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { type AnyMessage, parseMessage } from "../../src/dp/messages.ts";
import { RankSynchronizer } from "../../src/dp/rank_synchronizer.ts";
import type { StagePhase, StageVerdict } from "../../src/dp/stage_round.ts";
import { CoordinatorLink, FollowerLink } from "../../src/dp/zmq_link.ts";
import { closeAll, createGroup, failureOf, identity, openGroup, sleep } from "./group.ts";

interface RankPlan {
  /** Engine steps this rank's chain build takes. */
  readonly buildSteps: number;
  /** Whether its chains build. */
  readonly buildOk: boolean;
  /** A step in which this rank is slow to reach the round, and by how much (ms). */
  readonly slowStep?: { readonly step: number; readonly ms: number };
}

interface StepTrace {
  /** Per engine step: "busy" (built chains) or "idle". */
  readonly kinds: string[];
  /** Per step, the verdict of that step's stage round. */
  readonly verdicts: StageVerdict[];
  /** The step in which the stage settled on this rank. */
  readonly settledAt: number | null;
}

/**
 * One rank's idle decode-sweep steps while a rung is staged, the way the benchmark
 * drives them: the engine step (a build chunk or nothing), the stage round, then the
 * per-step group barrier. After settlement the rank reports phase none.
 */
async function stageSteps(
  sync: RankSynchronizer,
  plan: RankPlan,
  steps: number,
): Promise<StepTrace> {
  const kinds: string[] = [];
  const verdicts: StageVerdict[] = [];
  let built = 0;
  let settledAt: number | null = null;
  for (let step = 1; step <= steps; step++) {
    const busy = settledAt === null && built < plan.buildSteps;
    if (busy) built++;
    kinds.push(busy ? "busy" : "idle");
    if (plan.slowStep?.step === step) await sleep(plan.slowStep.ms);
    const staging = settledAt === null;
    const phase: StagePhase = !staging ? "none" : built < plan.buildSteps ? "building" : "done";
    const verdict = await sync.stageRound(
      step,
      staging ? 8 : null,
      phase,
      phase === "done" ? plan.buildOk : null,
    );
    verdicts.push(verdict);
    if (verdict.allDone) settledAt = step;
    await sync.barrier(step);
  }
  return { kinds, verdicts, settledAt };
}

async function openLoggedGroup(size: number, timeoutMs = 3000) {
  const logs: string[][] = [...Array(size)].map(() => []);
  const rank0 = await RankSynchronizer.create(identity(0, size, 0), {
    timeoutMs,
    log: (l) => logs[0].push(l),
  });
  const group = [rank0];
  for (let r = 1; r < size; r++) {
    group.push(
      await RankSynchronizer.create(identity(r, size, rank0.port!), {
        timeoutMs,
        log: (l) => logs[r].push(l),
      }),
    );
  }
  await Promise.all(group.map((s) => s.connect()));
  return { group, logs };
}

test("delayed decision: a reply 0.3 s late still gives both ranks the same [busy, idle, idle]", async () => {
  const { group, logs } = await openLoggedGroup(2);
  try {
    const [t0, t1] = await Promise.all([
      stageSteps(group[0], { buildSteps: 1, buildOk: true, slowStep: { step: 1, ms: 300 } }, 3),
      stageSteps(group[1], { buildSteps: 1, buildOk: true }, 3),
    ]);
    // A follower that took "no reply yet" for "not settled" would settle a step later.
    assert.equal(t0.kinds, ["busy", "idle", "idle"]);
    assert.equal(t1.kinds, ["busy", "idle", "idle"]);
    assert.is(t0.settledAt, 1);
    assert.is(t1.settledAt, 1);
    assert.equal(t1.verdicts, t0.verdicts);
    assert.equal(logs, [
      ["stage batch=8 settled by the group (ok=true) at round 1"],
      ["stage batch=8 settled by the group (ok=true) at round 1"],
    ]);
  } finally {
    closeAll(group);
  }
});

test("a rank that keeps building holds the stage open; it settles on every rank in the same round", async () => {
  const { group, logs } = await openLoggedGroup(3);
  try {
    const traces = await Promise.all([
      stageSteps(group[0], { buildSteps: 1, buildOk: true }, 5),
      stageSteps(group[1], { buildSteps: 3, buildOk: true }, 5),
      stageSteps(group[2], { buildSteps: 1, buildOk: true }, 5),
    ]);
    assert.equal(traces[0].kinds, ["busy", "idle", "idle", "idle", "idle"]);
    assert.equal(traces[1].kinds, ["busy", "busy", "busy", "idle", "idle"]);
    for (const t of traces) {
      assert.is(t.settledAt, 3);
      assert.equal(t.verdicts.map((v) => v.allDone), [false, false, true, false, false]);
      assert.equal(t.verdicts[2], { seq: 3, allDone: true, ok: true });
    }
    for (const lines of logs) {
      assert.equal(lines, ["stage batch=8 settled by the group (ok=true) at round 3"]);
    }
  } finally {
    closeAll(group);
  }
});

test("one failed build gives ok=false on every rank", async () => {
  const { group, logs } = await openLoggedGroup(3);
  try {
    const traces = await Promise.all([
      stageSteps(group[0], { buildSteps: 2, buildOk: true }, 2),
      stageSteps(group[1], { buildSteps: 1, buildOk: true }, 2),
      stageSteps(group[2], { buildSteps: 2, buildOk: false }, 2),
    ]);
    for (const t of traces) assert.equal(t.verdicts[1], { seq: 2, allDone: true, ok: false });
    for (const lines of logs) {
      assert.equal(lines, ["stage batch=8 settled by the group (ok=false) at round 2"]);
    }
  } finally {
    closeAll(group);
  }
});

test("a follower blocks until rank 0 answers, and times out naming rank 0 when it never does", async () => {
  const group = await openGroup(2, { timeoutMs: 300 });
  try {
    const err = await failureOf(group[1].stageRound(1, 8, "building", null));
    assert.is(err.code, "timeout");
    assert.equal(err.ranks, [0]);
    assert.match(
      err.message,
      /waiting for rank 0 .* to answer rank 1's stage seq=1 batch=8 phase=building/,
    );
    // Rank 0's late rounds learn that rank 1 gave up (its notice, or its closed socket).
    const late = await failureOf((async () => {
      await group[0].stageRound(1, 8, "building", null);
      await group[0].stageRound(2, 8, "building", null);
    })());
    assert.is(late.code, "peer_failure");
    assert.equal(late.ranks, [1]);
    assert.match(late.message, /rank 1 (failed: timed out|is no longer connected)/);
  } finally {
    closeAll(group);
  }
});

test("rank 0 times out naming the follower that never reports, and tells the others", async () => {
  const group = await openGroup(3, { timeoutMs: 300 });
  try {
    const [e0, e1] = await Promise.all([
      failureOf(group[0].stageRound(1, 8, "done", true)),
      failureOf(group[1].stageRound(1, 8, "done", true)),
    ]);
    assert.is(e0.code, "timeout");
    assert.equal(e0.ranks, [2]);
    assert.match(e0.message, /timed out after 0\.3 s waiting for rank 2 in stage seq=1 batch=8/);
    assert.equal(e1.ranks, [2]);
    assert.match(e1.message, /^rank 0 stopped the group: timed out .* waiting for rank 2/);
    // The silent rank learns it too, in its next round.
    const e2 = await failureOf(group[2].stageRound(1, 8, "done", true));
    assert.match(e2.message, /^rank 0 stopped the group: timed out .* waiting for rank 2/);
  } finally {
    closeAll(group);
  }
});

test("statuses out of lockstep (seq or batch) fail every rank with 'ranks are not in lockstep'", async () => {
  for (const [seq2, batch2] of [[6, 8], [5, 4]]) {
    const group = await openGroup(3, { timeoutMs: 2000 });
    try {
      const errors = await Promise.all([
        failureOf(group[0].stageRound(5, 8, "building", null)),
        failureOf(group[1].stageRound(5, 8, "building", null)),
        failureOf(group[2].stageRound(seq2, batch2, "building", null)),
      ]);
      assert.is(errors[0].code, "lockstep");
      assert.equal(errors[0].ranks, [2]);
      assert.match(errors[0].message, /^ranks are not in lockstep: stage round statuses differ/);
      assert.match(errors[0].message, new RegExp(`rank 2 seq=${seq2} batch=${batch2}`));
      for (const err of errors.slice(1)) {
        assert.match(err.message, /^rank 0 stopped the group: ranks are not in lockstep/);
      }
    } finally {
      closeAll(group);
    }
  }
});

/** A misbehaving rank 2 on a real socket: it says hello properly, then sends `body`. */
async function malformedFollowerCase(body: string): Promise<{
  rank0: string;
  rank1: string;
  notice: AnyMessage;
}> {
  const group = await createGroup(3, { timeoutMs: 2000 }, [0, 1]);
  const raw = FollowerLink.connect(group[0].endpoint!, 2, { lingerMs: 0 });
  try {
    const deadline = () => performance.now() + 2000;
    await raw.send(
      JSON.stringify({ type: "hello", rank: 2, round: 0, size: 3, protocol: 1 }),
      deadline(),
    );
    const [connected] = await Promise.all([
      Promise.all(group.map((s) => s.connect())),
      raw.receive(deadline()),
    ]);
    void connected;
    const rounds = group.map((s) => failureOf(s.stageRound(1, 8, "done", true)));
    await raw.send(body, deadline());
    const [e0, e1] = await Promise.all(rounds);
    const frames = await raw.receive(deadline());
    assert.ok(frames, "rank 2 was not notified");
    return { rank0: e0.message, rank1: e1.message, notice: parseMessage(frames[0], "rank 0") };
  } finally {
    raw.close();
    closeAll(group);
  }
}

test("malformed statuses are rejected, and every follower (the sender too) is notified", async () => {
  const status = { type: "stage", rank: 2, round: 1, seq: 1, batch: 8, phase: "done", ok: true };
  const cases: [string, RegExp][] = [
    ["{not json", /malformed message from rank 2: not JSON/],
    [JSON.stringify({ ...status, ok: null }), /stage message has phase 'done' but no ok verdict/],
    [JSON.stringify({ ...status, phase: "building" }), /spurious ok verdict/],
    [JSON.stringify({ ...status, phase: "finished" }), /field 'phase' must be one of/],
    [JSON.stringify({ ...status, extra: 1 }), /unexpected field 'extra'/],
    [
      JSON.stringify({ ...status, rank: 1 }),
      /malformed message from rank 2: it claims to be rank 1/,
    ],
    [JSON.stringify({ ...status, type: "gossip" }), /unknown message type 'gossip'/],
  ];
  for (const [body, why] of cases) {
    const { rank0, rank1, notice } = await malformedFollowerCase(body);
    assert.match(rank0, why);
    assert.match(rank1, /^rank 0 stopped the group: /);
    assert.match(rank1, why);
    assert.is(notice.type, "abort");
    if (notice.type === "abort") {
      assert.is(notice.code, "protocol");
      assert.equal(notice.ranks, [2]);
      assert.match(notice.message, why);
    }
  }
});

/** A misbehaving rank 0 on a real socket: it welcomes rank 1, then answers its status with `reply`. */
async function malformedCoordinatorCase(reply: unknown): Promise<{
  rank1: string;
  code: string;
  notice: AnyMessage;
}> {
  const raw = await CoordinatorLink.bind("tcp://127.0.0.1:0", { lingerMs: 0 });
  const port = Number(/:(\d+)$/.exec(raw.endpoint)![1]);
  const follower = await RankSynchronizer.create(identity(1, 2, port), { timeoutMs: 2000 });
  try {
    const deadline = () => performance.now() + 2000;
    const connected = follower.connect();
    assert.ok(await raw.receive(deadline()));
    await raw.send(
      "1",
      JSON.stringify({ type: "welcome", rank: 0, round: 0, size: 2 }),
      deadline(),
    );
    await connected;
    const round = failureOf(follower.stageRound(1, 8, "done", true));
    const status = await raw.receive(deadline());
    assert.is(parseMessage(status!.frames[0], "rank 1").type, "stage");
    const body = typeof reply === "string" ? reply : JSON.stringify(reply);
    await raw.send("1", body, deadline());
    const err = await round;
    const notice = await raw.receive(deadline());
    assert.ok(notice, "rank 0 was not notified");
    return { rank1: err.message, code: err.code, notice: parseMessage(notice.frames[0], "rank 1") };
  } finally {
    follower.close();
    raw.close();
  }
}

test("malformed or out-of-lockstep verdicts are rejected by the follower, which notifies rank 0", async () => {
  const verdict = { type: "stage_decided", rank: 0, round: 1, seq: 1, all_done: true, ok: true };
  const cases: [unknown, string, RegExp][] = [
    ["][", "protocol", /malformed message from rank 0: not JSON/],
    [{ ...verdict, ok: null }, "protocol", /says all ranks are done but gives no ok verdict/],
    [{ ...verdict, all_done: false }, "protocol", /gives an ok verdict before all ranks are done/],
    [{ ...verdict, rank: 1 }, "protocol", /it claims to be rank 1/],
    [
      { ...verdict, seq: 2 },
      "lockstep",
      /ranks are not in lockstep: rank 0 answered stage_decided seq=2/,
    ],
    [{ ...verdict, round: 7 }, "lockstep", /ranks are not in lockstep/],
    [{ type: "barrier_done", rank: 0, round: 1, seq: 1 }, "lockstep", /answered barrier_done/],
  ];
  for (const [reply, code, why] of cases) {
    const { rank1, code: got, notice } = await malformedCoordinatorCase(reply);
    assert.is(got, code);
    assert.match(rank1, why);
    assert.is(notice.type, "error");
    if (notice.type === "error") {
      assert.is(notice.rank, 1);
      assert.match(notice.message, why);
    }
  }
});

test("a rank's own malformed status fails it and the group, on either role", async () => {
  for (const culprit of [0, 1]) {
    const group = await openGroup(3, { timeoutMs: 2000 });
    try {
      const errors = await Promise.all(
        group.map((s) => failureOf(s.stageRound(1, 8, "done", s.rank === culprit ? null : true))),
      );
      assert.match(
        errors[culprit].message,
        new RegExp(`^rank ${culprit}'s own stage message has phase 'done' but no ok verdict`),
      );
      const other = errors[2].message;
      assert.match(other, /^rank 0 stopped the group: /);
      assert.match(other, new RegExp(`rank ${culprit}'s own stage message`));
    } finally {
      closeAll(group);
    }
  }
});

test("a coordinator failure is forwarded to every follower waiting in a round", async () => {
  const group = await openGroup(3, { timeoutMs: 2000 });
  try {
    const waiting = [1, 2].map((r) => failureOf(group[r].stageRound(1, 8, "building", null)));
    await sleep(50);
    await group[0].abort(new Error("GPU device lost"));
    for (const err of await Promise.all(waiting)) {
      assert.is(err.code, "peer_failure");
      assert.equal(err.ranks, [0]);
      assert.is(err.message, "rank 0 stopped the group: rank 0 failed: GPU device lost");
    }
    assert.is(group[0].failure?.message, "rank 0 failed: GPU device lost");
  } finally {
    closeAll(group);
  }
});

test("a follower's failure reaches rank 0 and is forwarded to the other followers", async () => {
  const group = await openGroup(3, { timeoutMs: 2000 });
  try {
    const waiting = [0, 1].map((r) => failureOf(group[r].stageRound(1, 8, "building", null)));
    await group[2].abort(new Error("out of memory"));
    const [e0, e1] = await Promise.all(waiting);
    assert.is(e0.message, "rank 2 failed: out of memory");
    assert.equal(e0.ranks, [2]);
    assert.is(e1.message, "rank 0 stopped the group: rank 2 failed: out of memory");
    assert.equal(e1.ranks, [2]);
  } finally {
    closeAll(group);
  }
});

test.run();
