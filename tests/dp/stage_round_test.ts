import { test } from "uvu";
import * as assert from "uvu/assert";
import { DpError } from "../../src/dp/dp_error.ts";
import {
  checkStageStatus,
  checkStageVerdict,
  settleStageRound,
  stageSettledLine,
  type StageStatus,
} from "../../src/dp/stage_round.ts";

const done = (ok: boolean): StageStatus => ({ seq: 7, batch: 8, phase: "done", ok });
const building: StageStatus = { seq: 7, batch: 8, phase: "building", ok: null };

test("a stage settles only when every rank is done", () => {
  assert.equal(settleStageRound([done(true), building]), { seq: 7, allDone: false, ok: null });
  assert.equal(settleStageRound([done(true), done(true)]), { seq: 7, allDone: true, ok: true });
});

test("one failed build makes the verdict false for the group", () => {
  assert.equal(settleStageRound([done(true), done(false), done(true)]), {
    seq: 7,
    allDone: true,
    ok: false,
  });
});

test("rounds with no stage never settle", () => {
  const none: StageStatus = { seq: 3, batch: null, phase: "none", ok: null };
  assert.equal(settleStageRound([none, none]), { seq: 3, allDone: false, ok: null });
});

test("a seq or batch mismatch is 'ranks are not in lockstep' naming the ranks", () => {
  for (const other of [{ ...building, seq: 8 }, { ...building, batch: 4 }]) {
    try {
      settleStageRound([building, building, other]);
      assert.unreachable("settled out of lockstep");
    } catch (err) {
      assert.instance(err, DpError);
      assert.is((err as DpError).code, "lockstep");
      assert.match((err as Error).message, /^ranks are not in lockstep/);
      assert.equal((err as DpError).ranks, [2]);
    }
  }
});

test("a status has a verdict exactly when done and a batch exactly when staging", () => {
  assert.is(checkStageStatus(done(true)), null);
  assert.is(checkStageStatus(building), null);
  assert.match(checkStageStatus({ ...done(true), ok: null }) ?? "", /'done' but no ok verdict/);
  assert.match(checkStageStatus({ ...building, ok: false }) ?? "", /spurious ok verdict/);
  assert.match(checkStageStatus({ ...building, batch: null }) ?? "", /no batch/);
  assert.match(
    checkStageStatus({ seq: 1, batch: 8, phase: "none", ok: null }) ?? "",
    /'none' but names a batch/,
  );
  assert.match(checkStageStatus({ ...building, phase: "finished" }) ?? "", /must be one of/);
  assert.match(checkStageStatus({ ...building, seq: 1.5 }) ?? "", /field 'seq'/);
});

test("a verdict is ok=true|false exactly when all ranks are done", () => {
  assert.is(checkStageVerdict({ seq: 1, all_done: true, ok: false }), null);
  assert.match(checkStageVerdict({ seq: 1, all_done: true, ok: null }) ?? "", /no ok verdict/);
  assert.match(checkStageVerdict({ seq: 1, all_done: false, ok: true }) ?? "", /before all ranks/);
});

test("the settlement line is the same on every rank", () => {
  assert.is(
    stageSettledLine(8, false, 12),
    "stage batch=8 settled by the group (ok=false) at round 12",
  );
});

test.run();
