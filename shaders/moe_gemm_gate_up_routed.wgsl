// A batch-1 decode step's MoE routing inside its gate/up GEMM: every workgroup selects the
// token's top experts from its E router logits itself (in the order of lib/router_order.wgsl, as
// lib/router_top_k.wgsl ranks them), and grid row y takes the expert of rank y, whose one row is act row y (rows in rank order). The
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
// each subgroup's best remaining expert in a round of the selection (two rounds' slots in turn;
// subgroups hold at least 8 invocations in these forms)
const MAX_SG: u32 = WG / 8u;
const NONE: u32 = 0xffffffffu;
var<workgroup> round_best: array<u32, 2u * MAX_SG>;

fn token_of(row: u32) -> u32 {
  return 0u;
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_size) sg: u32,
  @builtin(subgroup_invocation_id) sl: u32,
) {
  let num_e = params.experts;
  let k = params.top_k;
  let y = wid.y;
  for (var e = lid; e < num_e; e += WG) {
    route_logit[e] = logits[e];
  }
  workgroupBarrier();
  // The experts of ranks 0 .. y (all top_k in column block 0, which writes the routing), one a
  // round: each invocation's best remaining expert of its own (lid, lid + WG, ...), the best of
  // its subgroup through shuffles, the best of the subgroups' through workgroup memory. Where
  // each invocation counted the experts ahead of its own (E comparisons an invocation in every
  // workgroup before its first weight load), this takes y + 1 rounds of a few shuffles: on the
  // H200 batch-1 steps took 3.86-3.91 ms against 3.93-3.94 at 1 x 1024 and 4.33-4.43 against
  // 4.44-4.48 at 1 x 8192 (three processes each in turn, session 39 call8).
  let sid = lid / sg;
  let nsg = WG / sg;
  let rounds = select(y + 1u, k, wid.x == 0u);
  var taken = 0u; // this invocation's experts already ranked, bit q for expert lid + q WG
  for (var r = 0u; r < rounds; r++) {
    var be = NONE;
    var bv = 0.0;
    var q = 0u;
    for (var e = lid; e < num_e; e += WG) {
      if ((taken & (1u << q)) == 0u) {
        let v = route_logit[e];
        if (be == NONE || ranked_ahead(v, e, bv, be)) {
          be = e;
          bv = v;
        }
      }
      q++;
    }
    for (var m = 1u; m < sg; m = m << 1u) {
      let oe = subgroupShuffleXor(be, m);
      let ov = subgroupShuffleXor(bv, m);
      if (oe != NONE && (be == NONE || ranked_ahead(ov, oe, bv, be))) {
        be = oe;
        bv = ov;
      }
    }
    let slot = (r % 2u) * MAX_SG;
    if (sl == 0u) {
      round_best[slot + sid] = be;
    }
    workgroupBarrier();
    var we = NONE;
    var wv = 0.0;
    for (var j = 0u; j < nsg; j++) {
      let ce = round_best[slot + j];
      if (ce != NONE) {
        let cv = route_logit[ce];
        if (we == NONE || ranked_ahead(cv, ce, wv, we)) {
          we = ce;
          wv = cv;
        }
      }
    }
    if (lid == 0u) {
      route_expert[r] = we;
      route_top[r] = wv;
    }
    if (we != NONE && we % WG == lid) {
      taken = taken | (1u << (we / WG));
    }
  }
  workgroupBarrier();
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
