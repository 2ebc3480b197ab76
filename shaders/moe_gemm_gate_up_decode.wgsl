// Grouped gate/up GEMM with the SwiGLU epilogue for decode (a few rows per expert), weight
// bound: each workgroup takes its work item's rows (lib/moe_gate_up_decode_rows.wgsl), x rows
// gathered through sorted_token from cache.
//   act[r, c] = silu(x[tok(r)] . w[e, c]) * (x[tok(r)] . w[e, inter + c])
//#include "lib/lane_group_sum.wgsl"
//#include "lib/lane_group_dots.wgsl"
//#include "lib/moe_work_item.wgsl"
//#include "lib/expert_tiles.wgsl"
//#include "lib/moe_gate_up_decode_rows.wgsl"

fn token_of(row: u32) -> u32 {
  return sorted_token[row];
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
  gate_up_decode_rows(info.x, info.y, info.z, wid.x, lid);
}
