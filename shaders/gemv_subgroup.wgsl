// y[m, n] (+)= sum_k x[m, k] * w[n, k]  (+= when params.accumulate: fused residual add), subgroup reduction: RPW rows per workgroup, WG / RPW
// invocations per row; partial sums meet through subgroupAdd, then workgroup memory
// (works for any subgroup size that divides WG / RPW).
var<workgroup> sg_partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
  let per_row = WG / RPW;
  let local_row = lid / per_row;
  let t = lid % per_row;
  let row = (wid.x + wid.y * nwg.x) * RPW + local_row;
  let valid = row < params.n;
  let k4 = params.k / 4u;
  for (var m0 = 0u; m0 < params.m; m0 += MT) {
    var acc = array<f32, MT>();
    if (valid) {
      for (var i = t; i < k4; i += per_row) {
        let wv = t4(w[row * k4 + i]);
        for (var j = 0u; j < MT; j++) {
          if (m0 + j < params.m) {
            acc[j] += dot(x[(m0 + j) * k4 + i], wv);
          }
        }
      }
    }
    // Only the rows this block holds: each reduction costs barriers.
    let jn = min(MT, params.m - m0);
    for (var j = 0u; j < jn; j++) {
      let s = subgroupAdd(acc[j]);
      if (lane == 0u) {
        sg_partial[lid / sg_size] = s;
      }
      workgroupBarrier();
      if (t == 0u && valid && m0 + j < params.m) {
        let groups = per_row / sg_size;
        let first = lid / sg_size;
        var total = 0.0;
        for (var g = 0u; g < groups; g++) {
          total += sg_partial[first + g];
        }
        let at = (m0 + j) * params.n + row;
        y[at] = select(total, y[at] + total, params.accumulate != 0u);
      }
      workgroupBarrier();
    }
  }
}
