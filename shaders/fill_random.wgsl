// out[offset + i] = T(base + scale * u(i)), u uniform in [-sqrt(3), sqrt(3)) (unit variance),
// from a counter-based hash of (seed, offset + i): deterministic, reproducible on the CPU.
// Synthetic models draw their production-sized weights with it, on the GPU.
fn mix32(v: u32) -> u32 {
  var x = v;
  x = (x ^ (x >> 16u)) * 0x7feb352du;
  x = (x ^ (x >> 15u)) * 0x846ca68bu;
  return x ^ (x >> 16u);
}

@compute @workgroup_size(WG)
fn main(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= params.count) {
    return;
  }
  let index = params.offset + i;
  let h = mix32(index ^ mix32(params.seed));
  let u = (f32(h >> 8u) / 16777216.0) * 2.0 - 1.0;
  out[index] = T(params.base + params.scale * 1.7320508 * u);
}
