// moe_route_dispatch with the tokens' top-k ranked one subgroup a token at a time
// (lib/router_top_k_subgroups.wgsl), then the dispatch's counts, offsets, work items, row order
// and indirect args (lib/moe_dispatch_steps.wgsl, as moe_dispatch). Where the `f32` form has one
// invocation count each (token, expert) pair's rank against the token's E logits in workgroup
// memory, a chunk of 8 tokens at a time, a subgroup here takes a token in k rounds of two
// reductions.
// Bytes: tokens * E * 4 read, tokens * k * 8 written, then moe_dispatch's.
//#include "lib/router_top_k_subgroups.wgsl"
//#include "lib/moe_dispatch_steps.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sg: u32,
) {
  router_top_k_subgroups(lid, lane, sg, 0u, WG / sg);
  // the top-k ids the invocations wrote to storage are visible to the whole workgroup
  storageBarrier();
  dispatch_assignments(lid, 0u, params.tokens * params.top_k);
}
