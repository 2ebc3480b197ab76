import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  collectionDue,
  GC_EVERY_MS,
  GC_HELD_EVERY_MS,
  holdCollections,
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

test.run();
