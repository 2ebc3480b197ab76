// y[m, n] (+)= sum_k x[m, k] * w[n, k]  (+= when params.accumulate: fused residual add): decode-shaped matrix-vector products (few tokens).
// One workgroup per weight row; the row is read once for MT tokens at a time.
//#include "lib/workgroup_sum.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= params.n) {
    return;
  }
  let k4 = params.k / 4u;
  for (var m0 = 0u; m0 < params.m; m0 += MT) {
    var acc = array<f32, MT>();
    for (var i = lid; i < k4; i += WG) {
      let wv = t4(w[row * k4 + i]);
      for (var j = 0u; j < MT; j++) {
        if (m0 + j < params.m) {
          acc[j] += dot(x[(m0 + j) * k4 + i], wv);
        }
      }
    }
    // Only the rows this block holds: each reduction costs barriers.
    let jn = min(MT, params.m - m0);
    for (var j = 0u; j < jn; j++) {
      let s = workgroup_sum(acc[j], lid);
      if (lid == 0u && m0 + j < params.m) {
        let at = (m0 + j) * params.n + row;
        y[at] = select(s, y[at] + s, params.accumulate != 0u);
      }
    }
  }
}
