import { test } from "uvu";
import * as assert from "uvu/assert";
import { PassTimer } from "../../src/gpu/timestamps.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("a full timer refuses the next pass rather than leave it out of the GPU time", async () => {
  const gpu = await sharedGpu();
  const timer = new PassTimer(gpu, 2);
  try {
    if (!timer.enabled) return; // no timestamp queries: nothing is timed, nothing to refuse
    assert.ok(timer.next("a"));
    assert.ok(timer.next("b"));
    assert.throws(() => timer.next("c"), /more than 2 passes between resolves \(pass "c"\)/);
  } finally {
    timer.destroy();
  }
});

test("a timer destroyed while a read waits frees that read's buffer", async () => {
  const gpu = await sharedGpu();
  const timer = new PassTimer(gpu, 1);
  if (!timer.enabled) return timer.destroy();
  const enc = gpu.device.createCommandEncoder();
  const pass = enc.beginComputePass({ timestampWrites: timer.next("empty") });
  pass.end();
  timer.resolve(enc);
  gpu.device.queue.submit([enc.finish()]);
  const reading = timer.read();
  timer.destroy();
  const spans = await reading;
  assert.equal(spans.map((s) => s.label), ["empty"]);
  assert.equal((timer as unknown as { readBuffers: GPUBuffer[] }).readBuffers, []);
});

test.run();
