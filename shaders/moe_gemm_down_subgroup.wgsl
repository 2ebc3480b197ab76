// Grouped down GEMM, decode-shaped (few rows per expert): one workgroup per (RPW output
// columns, work item); WG / RPW invocations share a row of w[e] (vec4 loads, read once
// per work item) and apply it to MT act rows at a time; partial sums meet through
// subgroupAdd, then workgroup memory (any subgroup size dividing WG / RPW).
//   y[r, n] = act[r, :] . w[e, n, :]
// Bytes: touched experts' weights once per work item, rows * inter * 4 read (from cache
// after the first column), rows * hidden * 4 written.
//#include "lib/moe_work_item.wgsl"
var<workgroup> sg_partial: array<f32, MT * WG>; // [MT values][subgroups]

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
  let info = moe_work_item(wid, nwg);
  if (info.x == NO_ITEM) {
    return;
  }
  let e = info.x;
  let row_end = info.z;
  let hidden = params.hidden;
  let k4 = params.inter / 4u;
  let per_col = WG / RPW;
  let t = lid % per_col;
  let col = wid.x * RPW + lid / per_col;
  let valid = col < hidden;
  let wrow = (e * hidden + col) * k4;
  let sg = lid / sg_size;
  for (var m0 = info.y; m0 < row_end; m0 += MT) {
    var acc = array<f32, MT>();
    if (valid) {
      for (var i = t; i < k4; i += per_col) {
        let wv = t4(w[wrow + i]);
        for (var j = 0u; j < MT; j++) {
          if (m0 + j < row_end) {
            acc[j] += dot(act[(m0 + j) * k4 + i], wv);
          }
        }
      }
    }
    for (var j = 0u; j < MT; j++) {
      let s = subgroupAdd(acc[j]);
      if (lane == 0u) {
        sg_partial[j * WG + sg] = s;
      }
    }
    workgroupBarrier();
    if (t == 0u && valid) {
      let groups = per_col / sg_size;
      for (var j = 0u; j < MT; j++) {
        if (m0 + j < row_end) {
          var s = 0.0;
          for (var q = 0u; q < groups; q++) {
            s += sg_partial[j * WG + sg + q];
          }
          y[(m0 + j) * hidden + col] = s;
        }
      }
    }
    workgroupBarrier();
  }
}
