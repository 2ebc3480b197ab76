/**
 * Stage settlement on one rank: a stage settles in the round its build reports done,
 * with that build's verdict, logged once; no other round settles; a report that breaks
 * the round's shape is refused.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { LocalStageSettlement } from "../../../src/bench/kvwarm/stage_settlement.ts";

test("none and building never settle; done settles at once with its own verdict, logged once", async () => {
  const logs: string[] = [];
  const s = new LocalStageSettlement((l) => logs.push(l));
  assert.equal(await s.round(1, null, "none", null), { allDone: false, ok: null });
  assert.equal(await s.round(2, 8, "building", null), { allDone: false, ok: null });
  assert.equal(await s.round(3, 8, "done", true), { allDone: true, ok: true });
  assert.equal(await s.round(9, 4, "done", false), { allDone: true, ok: false });
  assert.equal(s.settled, [[8, true, 3], [4, false, 9]]);
  assert.equal(logs, [
    "kvwarm: stage batch=8 settled locally (ok=true) at round 3",
    "kvwarm: stage batch=4 settled locally (ok=false) at round 9",
  ]);
});

test("a batch without a stage, or a verdict before done, is refused", () => {
  const s = new LocalStageSettlement();
  assert.throws(() => s.round(1, 8, "none", null), /phase none with batch 8/);
  assert.throws(() => s.round(1, null, "building", null), /phase building with batch null/);
  assert.throws(() => s.round(1, 8, "building", true), /phase building with ok true/);
  assert.throws(() => s.round(1, 8, "done", null), /phase done with ok null/);
});

test.run();
