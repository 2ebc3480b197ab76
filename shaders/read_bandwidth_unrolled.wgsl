// Read-bandwidth probe, UNROLL independent vec4 loads in flight per invocation per trip:
// invocation g reads g, g + G*WG, g + 2*G*WG, ... (the same partition as read_bandwidth.wgsl,
// visited UNROLL strides at a time), so partial sums match the same reference.
//#include "lib/workgroup_sum.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let stride = nwg.x * WG;
  var acc = array<vec4<f32>, UNROLL>();
  var i = wid.x * WG + lid;
  for (; i + (UNROLL - 1u) * stride < params.n4; i += UNROLL * stride) {
    for (var u = 0u; u < UNROLL; u++) {
      acc[u] += x[i + u * stride];
    }
  }
  for (; i < params.n4; i += stride) {
    acc[0] += x[i];
  }
  var total = vec4<f32>(0.0);
  for (var u = 0u; u < UNROLL; u++) {
    total += acc[u];
  }
  let sum = workgroup_sum(total.x + total.y + total.z + total.w, lid);
  if (lid == 0u) {
    partial[wid.x] = sum;
  }
}
