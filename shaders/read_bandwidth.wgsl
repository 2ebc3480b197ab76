// Read-bandwidth probe: partial[w] = sum of every vec4 component that invocation
// g = w * WG + lid visits on its grid stride (g, g + G*WG, ...), G = number of workgroups.
// Reads n4 * 16 bytes once; the HBM roofline of every benchmark divides by this rate.
//#include "lib/workgroup_sum.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let stride = nwg.x * WG;
  var acc = vec4<f32>(0.0);
  for (var i = wid.x * WG + lid; i < params.n4; i += stride) {
    acc += x[i];
  }
  let total = workgroup_sum(acc.x + acc.y + acc.z + acc.w, lid);
  if (lid == 0u) {
    partial[wid.x] = total;
  }
}
