import { test } from "uvu";
import * as assert from "uvu/assert";
import { DEFAULT_MEDIAN_POLICY, timedSamples } from "../../src/bench/timed_samples.ts";
import { decodePoint, prefillPoint } from "../../src/bench/point.ts";

test("the design's policy: median-of-3 for real-KV and giant points, one sample otherwise", () => {
  const p = DEFAULT_MEDIAN_POLICY;
  assert.is(timedSamples(decodePoint(8, 4096), "legacy", p), 1);
  assert.is(timedSamples(decodePoint(8, 4096), "real_kv", p), 3);
  assert.is(timedSamples(decodePoint(64, 1_000_000), "legacy", p), 3);
  assert.is(timedSamples(prefillPoint(1, 2048, 0), "not_applicable", p), 1);
  assert.is(timedSamples(prefillPoint(1, 256, 1024), "real_prefix", p), 3);
});

test("a giant threshold of 0 measures every point median-of-N, prompt-only prefills too", () => {
  const every = { repeats: 5, giantKvThreshold: 0 };
  assert.is(timedSamples(prefillPoint(1, 1, 0), "not_applicable", every), 5);
  assert.is(timedSamples(decodePoint(1, 2), "legacy", every), 5);
  // a threshold of 1 leaves the prompt-only prefills (no KV read) at one sample
  assert.is(
    timedSamples(prefillPoint(1, 1, 0), "not_applicable", { ...every, giantKvThreshold: 1 }),
    1,
  );
});

test.run();
