// The router's softmax top-k for one token whose E logits sit in router_logit (workgroup
// memory, filled by the caller): experts ranked by logit, ties to the lower expert index;
// each expert's rank is the number of experts ahead of it in that order, so every rank below
// k names exactly one expert (no sort, one pass over E logits). Writes topk_ids and
// topk_weights: the softmax probability, or that probability renormalized over the top k
// when params.norm_topk != 0 (Qwen3 norm_topk_prob, Mixtral). Needs workgroup_max and
// workgroup_sum; every invocation of the workgroup calls it (uniform control flow).
var<workgroup> router_logit: array<f32, MAX_E>;
var<workgroup> top_exp: array<f32, MAX_K>;

fn router_top_k(token: u32, lid: u32) {
  let num_e = params.experts;
  let k = params.top_k;
  // the caller's writes to router_logit are complete
  workgroupBarrier();
  var m = -3.0e38;
  for (var e = lid; e < num_e; e += WG) {
    m = max(m, router_logit[e]);
  }
  let row_max = workgroup_max(m, lid);
  var s = 0.0;
  for (var e = lid; e < num_e; e += WG) {
    s += exp(router_logit[e] - row_max);
  }
  let total = workgroup_sum(s, lid);
  for (var e = lid; e < num_e; e += WG) {
    let v = router_logit[e];
    var rank = 0u;
    for (var j = 0u; j < num_e; j++) {
      let u = router_logit[j];
      if (u > v || (u == v && j < e)) {
        rank++;
      }
    }
    if (rank < k) {
      top_exp[rank] = exp(v - row_max);
      topk_ids[token * k + rank] = i32(e);
    }
  }
  workgroupBarrier();
  if (lid < k) {
    var denom = total;
    if (params.norm_topk != 0u) {
      denom = 0.0;
      for (var j = 0u; j < k; j++) {
        denom += top_exp[j];
      }
    }
    topk_weights[token * k + lid] = top_exp[lid] / denom;
  }
}
