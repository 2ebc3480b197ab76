// The router's softmax top-k for one token whose E logits sit in router_logit (workgroup
// memory, filled by the caller): experts ranked by logit, ties to the lower expert index;
// each expert's rank is the number of experts ahead of it in that order, so every rank below
// k names exactly one expert (no sort). P = WG / E invocations (a power of two, at least 1)
// count an expert's rank over 1 / P of the logits each, and their counts meet in workgroup
// memory; the rank-0 expert's logit is the row's max. Writes topk_ids and topk_weights: the
// softmax probability, or that probability renormalized over the top k when
// params.norm_topk != 0 (Qwen3 norm_topk_prob, Mixtral; no sum over all E then). Needs
// workgroup_sum; every invocation of the workgroup calls it (uniform control flow).
// On the H200 (2026-12-01, validate at Qwen3-30B-A3B's 128 experts, 1024 invocations) the
// earlier form, one invocation an expert walking all E logits beside tree max and sum
// reductions, took about 4 us of moe_router_fused's 23.
//#include "lib/router_order.wgsl"
var<workgroup> router_logit: array<f32, MAX_E>;
var<workgroup> top_logit: array<f32, MAX_K>;
var<workgroup> rank_part: array<u32, WG>;

fn router_top_k(token: u32, lid: u32) {
  let num_e = params.experts;
  let k = params.top_k;
  var lanes = 1u;
  while (lanes * 2u * num_e <= WG) {
    lanes *= 2u;
  }
  let part = lid % lanes;
  let chunk = (num_e + lanes - 1u) / lanes;
  let j0 = part * chunk;
  let j1 = min(num_e, j0 + chunk);
  // the caller's writes to router_logit are complete
  workgroupBarrier();
  for (var e0 = 0u; e0 < num_e; e0 += WG / lanes) {
    let e = e0 + lid / lanes;
    var ahead = 0u;
    if (e < num_e) {
      let v = router_logit[e];
      for (var j = j0; j < j1; j++) {
        if (ranked_ahead(router_logit[j], j, v, e)) {
          ahead++;
        }
      }
    }
    rank_part[lid] = ahead;
    workgroupBarrier();
    if (part == 0u && e < num_e) {
      var rank = 0u;
      for (var i = 0u; i < lanes; i++) {
        rank += rank_part[lid + i];
      }
      if (rank < k) {
        top_logit[rank] = router_logit[e];
        topk_ids[token * k + rank] = i32(e);
      }
    }
    workgroupBarrier();
  }
  let row_max = top_logit[0];
  var total = 0.0;
  if (params.norm_topk == 0u) {
    var s = 0.0;
    for (var e = lid; e < num_e; e += WG) {
      s += exp(router_logit[e] - row_max);
    }
    total = workgroup_sum(s, lid);
  }
  if (lid < k) {
    var denom = total;
    if (params.norm_topk != 0u) {
      denom = 0.0;
      for (var j = 0u; j < k; j++) {
        denom += exp(top_logit[j] - row_max);
      }
    }
    topk_weights[token * k + lid] = exp(top_logit[lid] - row_max) / denom;
  }
}
