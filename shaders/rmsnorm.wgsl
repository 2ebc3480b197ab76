// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight   (one workgroup per row)
//#include "lib/rms_scale.wgsl"

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
  let scale = rms_scale(base, lid);
  for (var i = lid; i < params.n; i += WG) {
    out[base + i] = x[base + i] * scale * f32(weight[i]);
  }
}
