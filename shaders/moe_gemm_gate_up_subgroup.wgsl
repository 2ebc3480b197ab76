// Grouped gate/up GEMM with the SwiGLU epilogue, decode-shaped (few rows per expert):
// one workgroup per (RPW act columns, work item); WG / RPW invocations share an act
// column's gate row and up row of w[e] (vec4 loads, read once per work item) and apply
// them to MT token rows at a time, gathered through sorted_token; partial dot products
// meet through subgroupAdd, then workgroup memory (any subgroup size dividing WG / RPW).
//   act[r, c] = silu(x[tok(r)] . w[e, c]) * (x[tok(r)] . w[e, inter + c])
// Bytes: touched experts' weights once per work item, rows * hidden * 4 gathered (from
// cache after the first column), rows * inter * 4 written.
//#include "lib/moe_work_item.wgsl"
var<workgroup> sg_partial: array<f32, 2u * MT * WG>; // [2 * MT values][subgroups]

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
  let inter = params.inter;
  let k4 = params.hidden / 4u;
  let per_col = WG / RPW;
  let t = lid % per_col;
  let col = wid.x * RPW + lid / per_col;
  let valid = col < inter;
  let grow = (e * 2u * inter + col) * k4;
  let urow = grow + inter * k4;
  let sg = lid / sg_size;
  for (var m0 = info.y; m0 < row_end; m0 += MT) {
    var tok = array<u32, MT>();
    for (var j = 0u; j < MT; j++) {
      if (m0 + j < row_end) {
        tok[j] = sorted_token[m0 + j] * k4;
      }
    }
    var acc_g = array<f32, MT>();
    var acc_u = array<f32, MT>();
    if (valid) {
      for (var i = t; i < k4; i += per_col) {
        let wg = t4(w[grow + i]);
        let wu = t4(w[urow + i]);
        for (var j = 0u; j < MT; j++) {
          if (m0 + j < row_end) {
            let xv = x[tok[j] + i];
            acc_g[j] += dot(xv, wg);
            acc_u[j] += dot(xv, wu);
          }
        }
      }
    }
    for (var j = 0u; j < MT; j++) {
      let sg_g = subgroupAdd(acc_g[j]);
      let sg_u = subgroupAdd(acc_u[j]);
      if (lane == 0u) {
        sg_partial[(2u * j) * WG + sg] = sg_g;
        sg_partial[(2u * j + 1u) * WG + sg] = sg_u;
      }
    }
    workgroupBarrier();
    if (t == 0u && valid) {
      let groups = per_col / sg_size;
      for (var j = 0u; j < MT; j++) {
        if (m0 + j < row_end) {
          var g = 0.0;
          var u = 0.0;
          for (var q = 0u; q < groups; q++) {
            g += sg_partial[(2u * j) * WG + sg + q];
            u += sg_partial[(2u * j + 1u) * WG + sg + q];
          }
          act[(m0 + j) * inter + col] = g / (1.0 + exp(-g)) * u;
        }
      }
    }
    workgroupBarrier();
  }
}
