/**
 * warmComputePasses keeps the GPU busy until its time is up (at least one pass), and the passes
 * run what they encode.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { BufferUsage } from "../../src/gpu/device.ts";
import { readBuffer } from "../../src/gpu/buffers.ts";
import { warmComputePasses } from "../../src/gpu/timestamps.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("warm-up passes: one at least, more until the time is up, each one run", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  const module = d.createShaderModule({
    code: "@group(0) @binding(0) var<storage, read_write> n: array<u32>;\n" +
      "@compute @workgroup_size(1) fn main() { n[0] = n[0] + 1u; }",
  });
  const pipeline = d.createComputePipeline({
    layout: "auto",
    compute: { module, entryPoint: "main" },
  });
  const counter = d.createBuffer({
    size: 16,
    usage: BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
  });
  const group = d.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: counter } }],
  });
  const encode = (pass: GPUComputePassEncoder) => {
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(1);
  };
  try {
    assert.is(await warmComputePasses(gpu, "one", encode, 0), 1);
    const t0 = performance.now();
    const passes = await warmComputePasses(gpu, "timed", encode, 60);
    assert.ok(performance.now() - t0 >= 60, "returns after its time");
    assert.ok(passes >= 1);
    const n = new Uint32Array(await readBuffer(d, counter, 4));
    assert.is(n[0], 1 + passes, "every pass ran, and all were done on return");
  } finally {
    counter.destroy();
  }
});

test.run();
