// MoE router in one pass for decode-sized steps, one workgroup per token: the token's router
// logits (x . w[e] for every expert, f32 sums; written out too), then the softmax top-k of
// moe_router (lib/router_top_k.wgsl), where the GEMV of the router weight and moe_router
// took two dispatches and a round trip of the logits through memory.
// The token's x row goes to workgroup memory first (one coalesced pass), then
// lib/router_fused_logits.wgsl takes the logits and their top-k. The router weight (E x
// hidden) is read once a token, from cache after the first.
// On the H200 a first form that read x from memory beside 8-byte weight words took 30 us a
// layer in the profile at 1 token (the GEMV and moe_router 25).
// Bytes: E * hidden * 2 + tokens * (hidden * 4 + E * 4 + k * 8).
//#include "lib/workgroup_sum.wgsl"
//#include "lib/router_top_k.wgsl"
//#include "lib/router_fused_logits.wgsl"

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
  let words = params.hidden / 8u;
  for (var i = lid; i < 2u * words; i += WG) {
    xs[i] = x[token * 2u * words + i];
  }
  route_from_xs(token, lid);
}
