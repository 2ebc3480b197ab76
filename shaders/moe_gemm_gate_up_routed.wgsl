// A batch-1 decode step's MoE routing inside its gate/up GEMM: every workgroup ranks the
// token's E router logits itself (lib/router_order.wgsl, as lib/router_top_k.wgsl), and grid
// row y takes the expert of rank y, whose one row is act row y (rows in rank order). The
// workgroups of column block 0 write their item's routing for the kernels after it: topk_ids,
// topk_weights, row_of (the identity: row j is rank j), work_items and, in workgroup (0, 0), the
// item count and the indirect args (moe_gemm_down's are read). Where moe_route_dispatch and then
// the gate/up GEMM take two dispatches a layer, this takes one.
// Launched directly on a grid of (column blocks, top_k).
//#include "lib/lane_group_sum.wgsl"
//#include "lib/lane_group_dots.wgsl"
//#include "lib/expert_tiles.wgsl"
//#include "lib/moe_gate_up_decode_rows.wgsl"
//#include "lib/router_order.wgsl"
//#include "lib/moe_dispatch_args.wgsl"

var<workgroup> route_logit: array<f32, MAX_E>;
// the expert of each rank below top_k, and its logit
var<workgroup> route_expert: array<u32, MAX_K>;
var<workgroup> route_top: array<f32, MAX_K>;

fn token_of(row: u32) -> u32 {
  return 0u;
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let num_e = params.experts;
  let k = params.top_k;
  for (var e = lid; e < num_e; e += WG) {
    route_logit[e] = logits[e];
  }
  workgroupBarrier();
  for (var e = lid; e < num_e; e += WG) {
    let v = route_logit[e];
    var ahead = 0u;
    for (var j = 0u; j < num_e; j++) {
      if (ranked_ahead(route_logit[j], j, v, e)) {
        ahead++;
      }
    }
    if (ahead < k) {
      route_expert[ahead] = e;
      route_top[ahead] = v;
    }
  }
  workgroupBarrier();
  let y = wid.y;
  let e = min(route_expert[y], num_e - 1u);
  if (wid.x == 0u && lid == 0u) {
    let row_max = route_top[0];
    var denom = 0.0;
    if (params.norm_topk != 0u) {
      for (var j = 0u; j < k; j++) {
        denom += exp(route_top[j] - row_max);
      }
    } else {
      for (var j = 0u; j < num_e; j++) {
        denom += exp(route_logit[j] - row_max);
      }
    }
    topk_ids[y] = i32(e);
    topk_weights[y] = exp(route_top[y] - row_max) / denom;
    row_of[y] = y;
    work_items[1u + y] = vec4<u32>(e, y, y + 1u, 0u);
    if (y == 0u) {
      work_items[0] = vec4<u32>(k, k, 0u, 0u);
      write_dispatch_args(k);
    }
  }
  gate_up_decode_rows(e, y, y + 1u, wid.x, lid);
}
