import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  collectionDue,
  FINE_TURNS_HELD,
  GC_EVERY_MS,
  GC_HELD_EVERY_MS,
  holdCollections,
  nextTurnMs,
  TURN_HELD_MS,
  TURN_MS,
} from "../../src/gpu/event_pacing.ts";

test("held collections count from the point's start, not from the last collection", () => {
  holdCollections(false);
  const t0 = performance.now();
  // outside points a collection is due once GC_EVERY_MS passed since the last one
  assert.ok(collectionDue(t0 + 10 * GC_HELD_EVERY_MS));
  holdCollections(true);
  const t = performance.now();
  // a point starting long after the last collection owes none at its first waits
  assert.not.ok(collectionDue(t + 1));
  assert.not.ok(collectionDue(t + GC_HELD_EVERY_MS - 5));
  assert.ok(collectionDue(t + GC_HELD_EVERY_MS + 5));
  // holding again (the same point) does not restart the count
  holdCollections(true);
  assert.ok(collectionDue(t + GC_HELD_EVERY_MS + 5));
  holdCollections(false);
  assert.ok(GC_EVERY_MS < GC_HELD_EVERY_MS);
});

test("a hold shortens the turns for a budget of turns, then they are full length again", () => {
  holdCollections(false);
  assert.is(nextTurnMs(), TURN_MS);
  assert.ok(TURN_HELD_MS < TURN_MS);
  holdCollections(true);
  for (let i = 0; i < FINE_TURNS_HELD; i++) assert.is(nextTurnMs(), TURN_HELD_MS, `turn ${i}`);
  assert.is(nextTurnMs(), TURN_MS, "the budget is spent");
  // holding again within the same point keeps the spent budget; a new hold renews it
  holdCollections(true);
  assert.is(nextTurnMs(), TURN_MS);
  holdCollections(false);
  assert.is(nextTurnMs(), TURN_MS);
  holdCollections(true);
  assert.is(nextTurnMs(), TURN_HELD_MS);
  holdCollections(false);
});

test.run();
