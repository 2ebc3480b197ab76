// The MoE down GEMM with the combine fused, for steps in which each expert row is one token's
// (batch-1 decode): workgroup (column block, token t) owns GC output columns, and its
// NG = WG / LG lane groups take the token's ranks j = g, g + NG, ... (g: the lane group), each
// reading its expert's GC weight rows in words (WV vec4s, UNR loads in flight;
// lib/lane_group_dots.wgsl) against act row row_of[t, j]:
//   residual[t, c] += sum_j topk_weights[t, j] * (act[row_of[t, j]] . w[topk_ids[t, j], c])
// Each lane group's weighted sums meet through subgroup shuffles, then the groups' in workgroup
// memory, added in group order (deterministic, no float atomics); a row_of outside the rows adds
// nothing, as in moe_combine. Where moe_gemm_down writes y and moe_combine reads it back in a
// second dispatch, this takes one; the next layer's input norm then runs in its qkv GEMV
// (gemv_norm), not in the combine. With params.partials > 0 the residual first takes the split-K
// partial sums the o projection left (o_part: [partials, tokens, hidden], added in order, as
// moe_router_logits added them to the rows it normed). With params.norm_next != 0 it also leaves
// the next layer's qkv GEMV (gemv_scaled) its input weighted but not yet scaled,
// h[t, c] = residual[t, c] * norm_next[c], and the sum of its columns' squares,
// ss_part[t, block]: that GEMV scales its sums by rsqrt(sum of the blocks' parts / hidden + eps).
//#include "lib/lane_group_sum.wgsl"
//#include "lib/lane_group_dots.wgsl"
//#include "lib/expert_tiles.wgsl"
//#include "lib/moe_down_rows.wgsl"
const NG: u32 = WG / LG; // lane groups a workgroup
const WC: u32 = GC; // weight rows a lane group reads

var<workgroup> part: array<f32, NG * GC>;
var<workgroup> squares: array<f32, GC>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let t = wid.y;
  let hidden = params.hidden;
  let k4 = params.inter / 4u;
  let kw = k4 / WV; // weight words a row
  let lane = lid % LG;
  let g = lid / LG;
  let c0 = wid.x * GC;
  let rows = params.tokens * params.top_k;
  // the residual (with the o projection's partial sums) and the next norm's weight of the
  // column invocation lid < GC stores, read before the dot products: at the kernel's tail they
  // would be one more round trip to L2 after the workgroup's sums meet
  var res = 0.0;
  var nw = 0.0;
  if (lid < GC && c0 + lid < hidden) {
    let at = t * hidden + c0 + lid;
    res = residual[at];
    for (var s = 0u; s < params.partials; s++) {
      res += o_part[s * params.tokens * hidden + at];
    }
    if (params.norm_next != 0u) {
      // (the norm weight as its words are read: 4 or 8 values a word)
      let c = c0 + lid;
      nw = tw(norm_next[c / (4u * WV)], (c / 4u) % WV)[c % 4u];
    }
  }
  // this lane's weighted share of each column's sum over the group's ranks
  var total = array<f32, GC>();
  for (var j = g; j < params.top_k; j += NG) {
    let slot = t * params.top_k + j;
    let row = row_of[slot];
    if (row < rows) {
      let e = topk_ids[slot];
      let weight = topk_weights[slot];
      // Columns past hidden read a valid row and are never written.
      var wo = array<u32, WC>();
      for (var c = 0u; c < GC; c++) {
        wo[c] = (e * hidden * params.inter + tile_row(min(c0 + c, hidden - 1u), params.inter)) /
          (4u * WV);
      }
      var xo = array<u32, RT>();
      xo[0] = row * k4;
      let acc = lane_group_dots(wo, xo, 1u, kw, lane);
      for (var c = 0u; c < GC; c++) {
        total[c] += weight * acc[c];
      }
    }
  }
  for (var c = 0u; c < GC; c++) {
    let s = lane_group_sum(total[c]);
    if (lane == 0u) {
      part[g * GC + c] = s;
    }
  }
  workgroupBarrier();
  if (lid < GC) {
    var sq = 0.0;
    if (c0 + lid < hidden) {
      var sum = 0.0;
      for (var q = 0u; q < NG; q++) {
        sum += part[q * GC + lid];
      }
      let at = t * hidden + c0 + lid;
      let v = res + sum;
      residual[at] = v;
      if (params.norm_next != 0u) {
        h[at] = v * nw;
        sq = v * v;
      }
    }
    squares[lid] = sq;
  }
  if (params.norm_next != 0u) {
    workgroupBarrier();
    if (lid == 0u) {
      var ss = 0.0;
      for (var c = 0u; c < GC; c++) {
        ss += squares[c];
      }
      ss_part[t * nwg.x + wid.x] = ss;
    }
  }
}
