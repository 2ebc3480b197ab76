// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight   (one workgroup per row)
//#include "lib/workgroup_sum.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= params.rows) {
    return;
  }
  let base = row * params.n;
  var ss = 0.0;
  for (var i = lid; i < params.n; i += WG) {
    let v = x[base + i];
    ss += v * v;
  }
  let total = workgroup_sum(ss, lid);
  let scale = inverseSqrt(total / f32(params.n) + params.eps);
  for (var i = lid; i < params.n; i += WG) {
    out[base + i] = x[base + i] * scale * f32(weight[i]);
  }
}
