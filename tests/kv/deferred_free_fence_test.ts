import { test } from "uvu";
import * as assert from "uvu/assert";
import { DeferredFreeFence } from "../../src/kv/deferred_free_fence.ts";

test("items freed under an in-flight step wait for that step to complete", () => {
  const fence = new DeferredFreeFence<string>();
  const s1 = fence.beginStep();
  const s2 = fence.beginStep();
  assert.equal(fence.defer(s2, ["b"]), []);
  assert.equal(fence.defer(s1, ["a"]), []);
  assert.is(fence.numPending, 2);
  assert.equal(fence.completeStep(s1), ["a"]);
  assert.equal(fence.completeStep(s2), ["b"]);
  assert.is(fence.numPending, 0);
});

test("items of a step that already completed (or never ran) are returned at once", () => {
  const fence = new DeferredFreeFence<number>();
  assert.equal(fence.defer(0, [1]), [1]);
  const s = fence.beginStep();
  fence.completeStep(s);
  assert.equal(fence.defer(s, [2, 3]), [2, 3]);
});

test("steps complete in issue order", () => {
  const fence = new DeferredFreeFence<number>();
  fence.beginStep();
  const s2 = fence.beginStep();
  assert.throws(() => fence.completeStep(s2), /step 2 completed out of order/);
  assert.throws(() => new DeferredFreeFence().completeStep(1), /out of order/);
});

test.run();
