// MoE router, one workgroup per token: softmax over the token's router logits, then its
// top-k experts (ranked by logit, ties to the lower expert index) with their weights:
// the softmax probability, or that probability renormalized over the top k when
// params.norm_topk != 0 (Qwen3 norm_topk_prob, Mixtral).
// Each expert's rank is the number of experts ahead of it in that order, so every rank
// below k names exactly one expert; no sort, one pass over E logits in workgroup memory.
// Bytes: tokens * E * 4 read, tokens * k * 8 written.
//#include "lib/workgroup_max.wgsl"
//#include "lib/workgroup_sum.wgsl"

var<workgroup> router_logit: array<f32, MAX_E>;
var<workgroup> top_exp: array<f32, MAX_K>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let token = wid.x + wid.y * nwg.x;
  if (token >= params.tokens) {
    return;
  }
  let num_e = params.experts;
  let k = params.top_k;
  let base = token * num_e;
  var m = -3.0e38;
  for (var e = lid; e < num_e; e += WG) {
    let v = logits[base + e];
    router_logit[e] = v;
    m = max(m, v);
  }
  // workgroup_max's barriers also publish router_logit to the whole workgroup.
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
