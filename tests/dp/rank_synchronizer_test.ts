import { test } from "uvu";
import * as assert from "uvu/assert";
import type { CapacityEnvelope } from "../../src/dp/capacity.ts";
import { RankSynchronizer } from "../../src/dp/rank_synchronizer.ts";
import { closeAll, createGroup, failureOf, identity, openGroup, sleep } from "./group.ts";

const fast = { timeoutMs: 2000 };

const envelope: CapacityEnvelope = {
  usable_blocks: 1000,
  max_model_len: 4096,
  max_num_seqs: 32,
  max_batched_tokens: 4096,
  kvwarm_eligible: true,
  kvwarm_skip_reason: null,
};

test("a group of one opens no socket and settles every round locally", async () => {
  const lines: string[] = [];
  const sync = await RankSynchronizer.open(identity(0, 1, 29555), { log: (l) => lines.push(l) });
  try {
    assert.is(sync.endpoint, null);
    const capacity = await sync.negotiateCapacity(envelope);
    assert.is(capacity.usable_blocks, 1000);
    assert.is(await sync.agreeGridDigest("d1"), "d1");
    await sync.barrier(0);
    assert.equal(await sync.stageRound(1, 4, "building", null), {
      seq: 1,
      allDone: false,
      ok: null,
    });
    assert.equal(await sync.stageRound(2, 4, "done", true), { seq: 2, allDone: true, ok: true });
    assert.equal(lines, ["stage batch=4 settled by the group (ok=true) at round 2"]);
    const result = await sync.gatherResult(1, [0.5]);
    assert.equal(result.iteration_walls, [0.5]);
    assert.is(result.ranks?.length, 1);
    await sync.finish();
  } finally {
    sync.close();
  }
});

test("capacity: every rank gets the minimum envelope and kvwarm only if all are eligible", async () => {
  const group = await openGroup(3, fast);
  try {
    const sent = [
      envelope,
      { ...envelope, usable_blocks: 600, kvwarm_eligible: false, kvwarm_skip_reason: "flag_off" },
      { ...envelope, max_num_seqs: 16 },
    ];
    const got = await Promise.all(group.map((s, r) => s.negotiateCapacity(sent[r])));
    assert.equal(got.map((c) => [c.usable_blocks, c.max_num_seqs]), [[600, 16], [600, 16], [
      600,
      16,
    ]]);
    assert.equal(got.map((c) => c.kvwarm_eligible), [false, false, false]);
    assert.equal(got.map((c) => c.kvwarm_skip_reason), [
      "peer_ineligible",
      "flag_off",
      "peer_ineligible",
    ]);
  } finally {
    closeAll(group);
  }
});

test("grid digests: equal digests agree, different ones fail every rank listing them all", async () => {
  const group = await openGroup(3, fast);
  try {
    assert.equal(await Promise.all(group.map((s) => s.agreeGridDigest("abc"))), [
      "abc",
      "abc",
      "abc",
    ]);
    const errors = await Promise.all(
      group.map((s, r) => failureOf(s.agreeGridDigest(r === 1 ? "xyz" : "abc"))),
    );
    for (const err of errors) {
      assert.is(err.code, "disagreement");
      assert.match(
        err.message,
        /grid digests differ across ranks: rank 0 "abc", rank 1 "xyz", rank 2 "abc"/,
      );
    }
  } finally {
    closeAll(group);
  }
});

test("a point: ready -> prepare, arm -> go with equal shapes, gather with wall = max over ranks", async () => {
  const group = await openGroup(3, fast);
  try {
    const order: string[] = [];
    await Promise.all(group.map(async (s) => {
      await s.ready(1, "decode:8:4096");
      order.push(`prepared ${s.rank}`);
    }));
    await Promise.all(group.map((s) => s.arm(1, { num_requests: 8, scheduled_tokens: 8 })));
    const results = await Promise.all(
      group.map((s, r) => s.gatherResult(1, [0.010 + r / 1000, 0.020 - r / 1000], { rank: r })),
    );
    for (const res of results) assert.equal(res.iteration_walls, [0.012, 0.020]);
    assert.equal(results[0].ranks?.map((x) => x.data), [{ rank: 0 }, { rank: 1 }, { rank: 2 }]);
    assert.is(results[1].ranks, null);
    await Promise.all(group.map((s) => s.cleanup(1)));
    assert.equal(await Promise.all(group.map((s) => s.boundaryVote(1, false))), [
      false,
      false,
      false,
    ]);
    assert.equal(await Promise.all(group.map((s, r) => s.boundaryVote(2, r === 2))), [
      true,
      true,
      true,
    ]);
    assert.is(order.length, 3);
    await Promise.all(group.map((s) => s.finish()));
  } finally {
    closeAll(group);
  }
});

test("GO comes only after every rank has armed (a late rank holds the others)", async () => {
  const group = await openGroup(3, fast);
  try {
    const events: string[] = [];
    await Promise.all(group.map(async (s) => {
      if (s.rank === 2) {
        await sleep(100);
        events.push("rank 2 armed");
      }
      await s.arm(1, { num_requests: 1 });
      events.push(`rank ${s.rank} go`);
    }));
    assert.is(events[0], "rank 2 armed");
    assert.equal(events.slice(1).sort(), ["rank 0 go", "rank 1 go", "rank 2 go"]);
  } finally {
    closeAll(group);
  }
});

test("arm refuses a point whose scheduled shapes differ, naming every rank's shape", async () => {
  const group = await openGroup(2, fast);
  try {
    const errors = await Promise.all(
      group.map((s, r) =>
        failureOf(s.arm(3, { num_requests: 8, scheduled_tokens: r === 0 ? 8 : 9 }))
      ),
    );
    for (const err of errors) {
      assert.is(err.code, "disagreement");
      assert.match(err.message, /scheduled shapes of benchmark_id=3 differ across ranks/);
      assert.match(err.message, /"scheduled_tokens":9/);
    }
  } finally {
    closeAll(group);
  }
});

test("ranks at different points are not in lockstep", async () => {
  const group = await openGroup(2, fast);
  try {
    const errors = await Promise.all(group.map((s, r) => failureOf(s.ready(r + 1, "p"))));
    for (const err of errors) {
      assert.is(err.code, "lockstep");
      assert.match(err.message, /ranks are not in lockstep: points differ/);
    }
  } finally {
    closeAll(group);
  }
});

test("the per-step barrier keeps ranks in lockstep and measures its cost", async () => {
  const group = await openGroup(3, fast);
  try {
    const steps: number[][] = [[], [], []];
    await Promise.all(group.map(async (s) => {
      for (let step = 0; step < 50; step++) {
        steps[s.rank].push(step);
        await s.barrier(step);
      }
    }));
    for (const s of group) {
      const cost = s.barrierCost();
      assert.is(cost.rounds, 50);
      assert.ok(cost.mean_us > 0 && cost.max_us >= cost.mean_us);
    }
    const errors = await Promise.all(group.map((s, r) => failureOf(s.barrier(r === 2 ? 51 : 50))));
    for (const err of errors) {
      assert.is(err.code, "lockstep");
      assert.match(err.message, /ranks are not in lockstep: barrier steps differ/);
    }
  } finally {
    closeAll(group);
  }
});

test("a rank in a different kind of round is not in lockstep", async () => {
  const group = await openGroup(2, fast);
  try {
    const [e0, e1] = await Promise.all([
      failureOf(group[0].barrier(4)),
      failureOf(group[1].stageRound(4, null, "none", null)),
    ]);
    assert.match(
      e0.message,
      /ranks are not in lockstep: rank 1 sent stage seq=4 .* while rank 0 waits for barrier seq=4/,
    );
    assert.match(e1.message, /^rank 0 stopped the group: ranks are not in lockstep/);
  } finally {
    closeAll(group);
  }
});

test("a rank that never connects: every rank fails with a timeout naming it", async () => {
  const group = await createGroup(3, { timeoutMs: 300 }, [0, 1]);
  try {
    const [e0, e1] = await Promise.all(group.map((s) => failureOf(s.connect())));
    assert.is(e0.code, "timeout");
    assert.equal(e0.ranks, [2]);
    assert.match(e0.message, /rank 2 never connected to rank 0 at tcp:\/\/127\.0\.0\.1:\d+/);
    assert.is(e1.code, "timeout");
    assert.equal(e1.ranks, [2]);
    assert.match(e1.message, /^rank 0 stopped the group: rank 2 never connected/);
  } finally {
    closeAll(group);
  }
});

test("a follower whose rank 0 never starts times out naming rank 0", async () => {
  const follower = await RankSynchronizer.create(identity(1, 2, 1), { timeoutMs: 300 });
  try {
    const err = await failureOf(follower.connect());
    assert.is(err.code, "timeout");
    assert.equal(err.ranks, [0]);
    assert.match(err.message, /rank 0 at tcp:\/\/127\.0\.0\.1:1 did not answer rank 1's hello/);
  } finally {
    follower.close();
  }
});

test("ranks started with different group sizes refuse each other", async () => {
  const rank0 = await RankSynchronizer.create(identity(0, 2, 0), { timeoutMs: 1000 });
  const rank1 = await RankSynchronizer.create(identity(1, 3, rank0.port!), { timeoutMs: 1000 });
  try {
    const [e0, e1] = await Promise.all([failureOf(rank0.connect()), failureOf(rank1.connect())]);
    assert.is(e0.code, "config");
    assert.match(e0.message, /rank 1 was started with size 3/);
    assert.match(e1.message, /^rank 0 stopped the group: ranks disagree on the group size/);
  } finally {
    rank0.close();
    rank1.close();
  }
});

test("rank 0 on a port that is taken fails with a clear error", async () => {
  const first = await RankSynchronizer.create(identity(0, 2, 0));
  try {
    const err = await failureOf(RankSynchronizer.create(identity(0, 2, first.port!)));
    assert.is(err.code, "config");
    assert.match(err.message, /^rank 0 cannot bind tcp:\/\/127\.0\.0\.1:\d+: /);
  } finally {
    first.close();
  }
});

test("after a failure every call is refused and names the original failure", async () => {
  const group = await openGroup(2, fast);
  try {
    await Promise.all(group.map((s, r) => failureOf(s.agreeGridDigest(`d${r}`))));
    for (const s of group) {
      const err = await failureOf(s.barrier(0));
      assert.is(err.code, "closed");
      assert.match(err.message, /the group already failed .*grid digests differ/);
      assert.is(s.failure?.code, "disagreement");
    }
  } finally {
    closeAll(group);
  }
});

test("a follower that sends its notice and leaves mid-round: rank 0 reports the notice, not a lost rank", async () => {
  // Ctrl-C on a group: rank 1 has sent its barrier request when its SIGINT handler aborts the
  // group and exits; rank 0, answering that round, finds rank 1 gone before it has read the
  // notice queued behind the request. The notice is what ends the group (as interrupted).
  const group = await openGroup(2, fast);
  try {
    const waiting = failureOf(group[1].barrier(3));
    await sleep(100);
    await group[1].abort(new Error("interrupted by SIGINT"));
    // (its own pending round ends with its notice)
    assert.match((await waiting).message, /interrupted by SIGINT$/);
    // rank 1's socket is closed: a reply to it can no longer be routed
    await sleep(300);
    const err = await failureOf(group[0].barrier(3));
    assert.is(err.code, "peer_failure");
    assert.equal(err.ranks, [1]);
    assert.is(err.message, "rank 1 failed: interrupted by SIGINT");
  } finally {
    closeAll(group);
  }
});

test("a rank that never connects is named by rank 0 even when a follower gave up on rank 0 first", async () => {
  // bench calls connect() after loading the model, so the ranks' hello rounds start apart
  // by their load times. Here rank 1 starts 1.5 s before rank 0 (the follower's grace is a
  // quarter of the 1 s limit), and rank 2 died while loading: it never connects. README:
  // "a rank that dies or never connects is named in the others' timeout error".
  const group = await createGroup(3, { timeoutMs: 1000 }, [0, 1]);
  try {
    const e1 = failureOf(group[1].connect());
    await sleep(1500);
    const e0 = await failureOf(group[0].connect());
    const err1 = await e1;
    // rank 0 knows who is missing (it holds rank 1's hello); its error, the one the merged
    // artifact reports, must name rank 2, not only rank 1's complaint about rank 0.
    assert.equal([e0.code, e0.ranks], ["timeout", [2]]);
    assert.match(
      e0.message,
      /^rank 2 never connected to rank 0 at .*; rank 1 stopped waiting first/,
    );
    assert.match(
      err1.message,
      /rank 0 is not up, or still waits for a rank that has not connected/,
    );
  } finally {
    closeAll(group);
  }
});

test.run();
