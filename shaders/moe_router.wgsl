// MoE router, one workgroup per token: softmax over the token's router logits, then its
// top-k experts with their weights (lib/router_top_k.wgsl).
// Bytes: tokens * E * 4 read, tokens * k * 8 written.
//#include "lib/workgroup_sum.wgsl"
//#include "lib/router_top_k.wgsl"

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
  for (var e = lid; e < num_e; e += WG) {
    router_logit[e] = logits[token * num_e + e];
  }
  router_top_k(token, lid);
}
