// MoE router, a subgroup a token (moe_router's `f32-sg` form): the softmax top-k of
// lib/router_top_k_subgroups.wgsl, k rounds of two subgroup reductions a token with the lane's
// logits in registers, over a grid of workgroups of WG / sg_size tokens each (grid-stride: any
// subgroup size covers every token). Where the `f32` form gives a token a workgroup of 64 that
// counts each expert's rank against every logit between barriers, this one has no barrier and
// no workgroup memory.
// Bytes: tokens * E * 4 read, tokens * k * 8 written.
//#include "lib/router_top_k_subgroups.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sg: u32,
) {
  let per_wg = WG / sg;
  let w = wid.x + wid.y * nwg.x;
  router_top_k_subgroups(lid, lane, sg, w * per_wg, nwg.x * nwg.y * per_wg);
}
