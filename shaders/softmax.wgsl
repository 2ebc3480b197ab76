// out[r, :] = softmax(x[r, :]), numerically stable (max subtracted); one workgroup per row.
//#include "lib/workgroup_max.wgsl"
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
  var m = -3.0e38;
  for (var i = lid; i < params.n; i += WG) {
    m = max(m, x[base + i]);
  }
  let row_max = workgroup_max(m, lid);
  var s = 0.0;
  for (var i = lid; i < params.n; i += WG) {
    s += exp(x[base + i] - row_max);
  }
  let inv = 1.0 / workgroup_sum(s, lid);
  for (var i = lid; i < params.n; i += WG) {
    out[base + i] = exp(x[base + i] - row_max) * inv;
  }
}
