/**
 * Whether a device's subgroups are runs of consecutive invocations: in a 1-D workgroup,
 * invocation `lid` is lane `lid % size` of subgroup `lid / size`. The decode kernels' lane
 * groups (LG consecutive invocations meeting through subgroupShuffleXor) rely on it. NVIDIA
 * and lavapipe lay subgroups out this way; WGSL and Vulkan do not promise it, so the device
 * is asked once, when it is opened.
 *
 * ```ts
 * await subgroupLanesAreConsecutive(device); // true on NVIDIA and lavapipe
 * ```
 */
const WG = 128;

const PROBE = `enable subgroups;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(${WG})
fn main(
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) size: u32,
) {
  let first = subgroupBroadcastFirst(lid); // lane 0's invocation in a linear layout
  // 1 where this invocation sits where a linear layout puts it
  out[lid] = select(0u, 1u, lane == lid % size && first == lid - lane);
}
`;

/** Runs the probe on `device` (which must have the subgroups feature). */
export async function subgroupLanesAreConsecutive(device: GPUDevice): Promise<boolean> {
  const module = device.createShaderModule({ code: PROBE, label: "subgroup layout probe" });
  const pipeline = await device.createComputePipelineAsync({
    layout: "auto",
    compute: { module, entryPoint: "main" },
  });
  const bytes = WG * 4;
  const out = device.createBuffer({ size: bytes, usage: 0x80 | 0x04 }); // STORAGE | COPY_SRC
  const read = device.createBuffer({ size: bytes, usage: 0x01 | 0x08 }); // MAP_READ | COPY_DST
  try {
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(
      0,
      device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: [{ binding: 0, resource: { buffer: out } }],
      }),
    );
    pass.dispatchWorkgroups(1);
    pass.end();
    enc.copyBufferToBuffer(out, 0, read, 0, bytes);
    device.queue.submit([enc.finish()]);
    await read.mapAsync(1); // GPUMapMode.READ
    const flags = new Uint32Array(read.getMappedRange().slice(0));
    read.unmap();
    return flags.every((f) => f === 1);
  } finally {
    out.destroy();
    read.destroy();
  }
}
