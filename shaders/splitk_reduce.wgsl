// out[i] (+)= sum over s of part[s, i]: the split-K partial sums of gemm_tc added up (and
// added to the residual already in out when accumulate is set). One vec4 an invocation,
// grid-stride.
@compute @workgroup_size(WG)
fn main(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let stride = nwg.x * nwg.y * WG;
  for (var i = gid.x + gid.y * nwg.x * WG; i < params.count4; i += stride) {
    var sum = vec4<f32>(0.0);
    if (params.accumulate != 0u) {
      sum = out[i];
    }
    for (var s = 0u; s < params.splits; s++) {
      sum += part[s * params.count4 + i];
    }
    out[i] = sum;
  }
}
