// Grouped down GEMM for decode (a few rows per expert), weight bound: the expert's weights
// are read once per RT rows at the HBM rate, each load applied to every row in registers. A
// lane group of LG invocations owns GC output columns (rows of w[e]); its lanes split the
// inter dimension in weight words (WV vec4s: 8 bytes where packed, 16 where the form reads wide
// words), UNR loads in flight per column, and meet through subgroup shuffles (no workgroup
// memory, no barrier). act rows are in expert-sorted order.
//   y[r, c] = act[r] . w[e, c]
//#include "lib/lane_group_sum.wgsl"
//#include "lib/lane_group_dots.wgsl"
//#include "lib/moe_work_item.wgsl"
//#include "lib/expert_tiles.wgsl"
//#include "lib/moe_down_rows.wgsl"
const CPW: u32 = (WG / LG) * GC; // output columns a workgroup owns
const WC: u32 = GC; // weight rows a lane group reads

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
  let hidden = params.hidden;
  let k4 = params.inter / 4u;
  let kw = k4 / WV; // weight words a row
  let lane = lid % LG;
  let c0 = wid.x * CPW + (lid / LG) * GC;
  // Columns past hidden read a valid row and are never written.
  var wo = array<u32, WC>();
  for (var c = 0u; c < GC; c++) {
    wo[c] = (e * hidden * params.inter + tile_row(min(c0 + c, hidden - 1u), params.inter)) / (4u * WV);
  }
  for (var r0 = info.y; r0 < info.z; r0 += RT) {
    let nr = min(RT, info.z - r0);
    var xo = array<u32, RT>();
    for (var r = 0u; r < RT; r++) {
      xo[r] = (r0 + r) * k4;
    }
    let acc = lane_group_dots(wo, xo, nr, kw, lane);
    for (var r = 0u; r < RT; r++) {
      if (r < nr) {
        for (var c = 0u; c < GC; c++) {
          let s = lane_group_sum(acc[r * GC + c]);
          if (lane == (r * GC + c) % LG && c0 + c < hidden) {
            y[(r0 + r) * hidden + c0 + c] = s;
          }
        }
      }
    }
  }
}
