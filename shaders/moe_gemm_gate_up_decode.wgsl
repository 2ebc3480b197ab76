// Grouped gate/up GEMM with the SwiGLU epilogue for decode (a few rows per expert), weight
// bound: the expert's weights are read once per RT rows at the HBM rate, each load applied
// to every row in registers. A lane group of LG invocations owns GC act columns (their gate
// rows and up rows of w[e]); its lanes split the hidden dimension in vec4 steps, UNR loads
// in flight per column, and meet through subgroup shuffles (no workgroup memory, no
// barrier). x rows are gathered through sorted_token from cache.
//   act[r, c] = silu(x[tok(r)] . w[e, c]) * (x[tok(r)] . w[e, inter + c])
//#include "lib/lane_group_sum.wgsl"
//#include "lib/lane_group_dots.wgsl"
//#include "lib/moe_work_item.wgsl"
//#include "lib/expert_tiles.wgsl"
const CPW: u32 = (WG / LG) * GC; // act columns a workgroup owns
const WC: u32 = 2u * GC; // weight rows a lane group reads: GC gate rows, then GC up rows

// vec4 kk (4 weights) of the expert weight row at wo, row by row or in tiles
fn w_index(wo: u32, kk: u32) -> u32 {
  return wo + tile_quad(kk);
}

fn row_in(i: u32) -> vec4<f32> {
  return x[i];
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let info = moe_work_item(wid, nwg);
  if (info.x == NO_ITEM) {
    return;
  }
  let e = info.x;
  let inter = params.inter;
  let k4 = params.hidden / 4u;
  let lane = lid % LG;
  let c0 = wid.x * CPW + (lid / LG) * GC;
  // Columns past inter read a valid row and are never written.
  var wo = array<u32, WC>();
  for (var c = 0u; c < GC; c++) {
    wo[c] = (e * 2u * inter * params.hidden + tile_row(min(c0 + c, inter - 1u), params.hidden)) / 4u;
    wo[GC + c] = wo[c] + inter * k4;
  }
  for (var r0 = info.y; r0 < info.z; r0 += RT) {
    let nr = min(RT, info.z - r0);
    var xo = array<u32, RT>();
    for (var r = 0u; r < RT; r++) {
      xo[r] = sorted_token[r0 + min(r, nr - 1u)] * k4;
    }
    let acc = lane_group_dots(wo, xo, nr, k4, lane);
    for (var r = 0u; r < RT; r++) {
      if (r < nr) {
        for (var c = 0u; c < GC; c++) {
          let g = lane_group_sum(acc[r * WC + c]);
          let up = lane_group_sum(acc[r * WC + GC + c]);
          if (lane == (r * GC + c) % LG && c0 + c < inter) {
            act[(r0 + r) * inter + c0 + c] = g / (1.0 + exp(-g)) * up;
          }
        }
      }
    }
  }
}
