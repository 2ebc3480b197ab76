/**
 * allocateRanges: a buffer a request, or ranges of arenas that start a new arena where the next
 * range would pass the adapter's largest buffer, 2 MiB ranges on 2 MiB and the rest on 256.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { allocateRanges } from "../../src/gpu/buffer_ranges.ts";
import { sharedGpu } from "../shared_gpu.ts";

const MiB = 2 ** 20;
const requests = [
  { label: "a", size: 400 },
  { label: "b", size: 3 * MiB },
  { label: "c", size: 256 },
  { label: "d", size: 5 * MiB },
];
const never = () => new Error("unexpected out of memory");

test("a buffer a request, each whole", async () => {
  const gpu = await sharedGpu();
  const { ranges, buffers, bytes } = await allocateRanges(gpu, requests, "each", never);
  try {
    assert.is(buffers.length, 4);
    assert.equal(ranges.map((r) => [r.offset, r.size]), requests.map((r) => [0, r.size]));
    assert.equal(ranges.map((r) => r.buffer), buffers);
    assert.is(bytes, 400 + 3 * MiB + 256 + 5 * MiB);
  } finally {
    for (const b of buffers) b.destroy();
  }
});

test("arenas: aligned ranges in order, a new arena where the largest buffer would overflow", async () => {
  const gpu = await sharedGpu();
  const small = { ...gpu, limits: { ...gpu.limits, maxBufferSize: 8 * MiB } };
  const { ranges, buffers, bytes } = await allocateRanges(small, requests, "arena", never, "t");
  try {
    assert.is(buffers.length, 2);
    assert.equal(buffers.map((b) => b.label), ["t 0", "t 1"]);
    assert.equal(
      ranges.map((r) => [buffers.indexOf(r.buffer), r.offset, r.size]),
      [[0, 0, 400], [0, 2 * MiB, 3 * MiB], [0, 5 * MiB, 256], [1, 0, 5 * MiB]],
    );
    assert.is(bytes, 5 * MiB + 256 + 5 * MiB);
    assert.equal(buffers.map((b) => b.size), [5 * MiB + 256, 5 * MiB]);
  } finally {
    for (const b of buffers) b.destroy();
  }
});

test.run();
