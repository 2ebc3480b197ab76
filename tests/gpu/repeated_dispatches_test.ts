import { test } from "uvu";
import * as assert from "uvu/assert";
import { readBuffer, STORAGE_USAGE, uploadBuffer } from "../../src/gpu/buffers.ts";
import { BufferUsage } from "../../src/gpu/device.ts";
import { repeatedDispatches } from "../../src/gpu/repeated_dispatches.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("a pass with repeated dispatches issues each dispatch, direct or indirect, twice or not at all", async () => {
  const { device } = await sharedGpu();
  // each workgroup counts itself once
  const module = device.createShaderModule({
    code: `@group(0) @binding(0) var<storage, read_write> n: atomic<u32>;
@compute @workgroup_size(1) fn main() { atomicAdd(&n, 1u); }`,
  });
  const pipeline = device.createComputePipeline({
    layout: "auto",
    compute: { module, entryPoint: "main" },
  });
  const count = uploadBuffer(device, "count", new Uint32Array([0]));
  const args = uploadBuffer(
    device,
    "args",
    new Uint32Array([5, 1, 1]),
    STORAGE_USAGE | BufferUsage.INDIRECT,
  );
  try {
    const group = device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [{ binding: 0, resource: { buffer: count } }],
    });
    const enc = device.createCommandEncoder();
    const plain = enc.beginComputePass();
    plain.setPipeline(pipeline);
    plain.setBindGroup(0, group);
    plain.dispatchWorkgroups(3); // 3
    plain.end();
    const pass = repeatedDispatches(enc.beginComputePass(), 2);
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(3); // 6
    pass.dispatchWorkgroupsIndirect(args, 0); // 10
    pass.end();
    const none = repeatedDispatches(enc.beginComputePass(), 0);
    none.setPipeline(pipeline);
    none.setBindGroup(0, group);
    none.dispatchWorkgroups(7); // 0
    none.dispatchWorkgroupsIndirect(args, 0); // 0
    none.end();
    device.queue.submit([enc.finish()]);
    assert.is(new Uint32Array(await readBuffer(device, count, 4))[0], 3 + 6 + 10);
    assert.throws(() => repeatedDispatches(plain, -1), /times = -1 must be a count/);
  } finally {
    count.destroy();
    args.destroy();
  }
});

test.run();
