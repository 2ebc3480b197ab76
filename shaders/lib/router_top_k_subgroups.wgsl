// The router's softmax top-k of a step's tokens, one subgroup a token at a time (moe_route_dispatch's
// and moe_router's `f32-sg` forms): subgroup q of the workgroup takes tokens t0 + q, t0 + q +
// t_step, ... (moe_route_dispatch's one workgroup: t0 0 and t_step WG / sg_size; moe_router's
// grid: its workgroup's first subgroup's token and the subgroups of the grid); lane l holds
// experts l, l + sg_size, ... (at most 64 each: E <= 64 x sg_size), and k rounds each take the
// best expert left (the highest logit, ties to the lower expert index, as lib/router_order.wgsl
// orders them: subgroupMax of the lanes' best, then subgroupMin of the experts that hold it), so
// round r names the expert of rank r. Lane r % sg_size keeps round r's expert and logit (k <= 2 x
// sg_size) and writes them:
// topk_ids, and topk_weights the softmax probability, or that probability renormalized over the top
// k when params.norm_topk != 0 (summed in rank order, as moe_router does; the softmax over all E
// experts sums each lane's terms, then the lanes). Where lib/router_top_k_rows.wgsl has one
// invocation count each (token, expert) pair's rank against all E logits, here a token takes k
// rounds of two subgroup reductions; where a lane holds at most 4 experts (E <= 4 x sg_size) their
// logits stay in its registers between rounds. Assumes subgroups are runs of consecutive invocations
// (lane = lid % sg_size; the variant declares minSubgroupSize 8: k <= 16 <= 2 x sg_size). The
// including shader binds logits, topk_ids and topk_weights and has params.{tokens, experts,
// top_k, norm_topk}.
// the lowest finite f32 (no logit is below it)
const LOWEST: f32 = -0x1.fffffep+127f;

// A lane's best expert left: its logit and its slot i (expert lane + sg * i), 64 where none.
struct LaneBest {
  v: f32,
  i: u32,
}

// Over the lane's first 4 slots, held in `held` (rows of at most 4 x sg experts: no loads a
// round), else over its slots' logits in storage.
fn lane_best(
  row: u32,
  lane: u32,
  sg: u32,
  per_lane: u32,
  taken: vec2<u32>,
  held: vec4<f32>,
) -> LaneBest {
  var b = LaneBest(LOWEST, 64u);
  if (per_lane <= 4u) {
    for (var i = 0u; i < 4u; i++) {
      if ((taken.x & (1u << i)) == 0u && (b.i == 64u || held[i] > b.v)) {
        b = LaneBest(held[i], i);
      }
    }
    return b;
  }
  for (var i = 0u; i < per_lane; i++) {
    if ((taken[i / 32u] & (1u << (i % 32u))) == 0u) {
      let v = logits[row + lane + sg * i];
      if (b.i == 64u || v > b.v) {
        b = LaneBest(v, i);
      }
    }
  }
  return b;
}

@diagnostic(off, subgroup_uniformity)
fn router_top_k_subgroups(lid: u32, lane: u32, sg: u32, t0: u32, t_step: u32) {
  let num_e = params.experts;
  let k = params.top_k;
  let per_lane = (num_e + sg - 1u) / sg;
  for (var t = t0 + lid / sg; t < params.tokens; t += t_step) {
    let row = t * num_e;
    // bit i of word i / 32: expert lane + sg * i taken, or past the last expert
    var taken = vec2<u32>(0u);
    var lane_max = LOWEST;
    var held = vec4<f32>(LOWEST);
    for (var i = 0u; i < per_lane; i++) {
      let e = lane + sg * i;
      if (e < num_e) {
        let v = logits[row + e];
        lane_max = max(lane_max, v);
        if (i < 4u) {
          held[i] = v;
        }
      } else {
        taken[i / 32u] |= 1u << (i % 32u);
      }
    }
    // (slots past per_lane are never read: held as taken)
    for (var i = per_lane; i < 4u; i++) {
      taken.x |= 1u << i;
    }
    // the rank-0 expert's logit is the row's max
    let row_max = subgroupMax(lane_max);
    var all_sum = 0.0;
    if (params.norm_topk == 0u) {
      var part = 0.0;
      for (var i = 0u; i < per_lane; i++) {
        let e = lane + sg * i;
        if (e < num_e) {
          part += exp(logits[row + e] - row_max);
        }
      }
      all_sum = subgroupAdd(part);
    }
    // ranks lane and lane + sg
    var my_id = vec2<u32>(0u);
    var my_logit = vec2<f32>(0.0);
    var top_sum = 0.0;
    for (var r = 0u; r < k; r++) {
      // this lane's best expert left: the highest logit, the lowest expert on ties
      let b = lane_best(row, lane, sg, per_lane, taken, held);
      let best = b.v;
      let best_i = b.i;
      let m = subgroupMax(select(LOWEST, best, best_i < 64u));
      let mine = best_i < 64u && best == m;
      let e_star = subgroupMin(select(0xffffffffu, lane + sg * best_i, mine));
      if (mine && lane + sg * best_i == e_star) {
        taken[best_i / 32u] |= 1u << (best_i % 32u);
      }
      if (r % sg == lane) {
        my_id[r / sg] = e_star;
        my_logit[r / sg] = m;
      }
      top_sum += exp(m - row_max);
    }
    let denom = select(all_sum, top_sum, params.norm_topk != 0u);
    for (var h = 0u; h < 2u; h++) {
      let r = lane + h * sg;
      if (r < k) {
        topk_ids[t * k + r] = i32(my_id[h]);
        topk_weights[t * k + r] = exp(my_logit[h] - row_max) / denom;
      }
    }
  }
}
