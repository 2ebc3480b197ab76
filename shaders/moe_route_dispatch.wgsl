// MoE routing and dispatch of a step of few tokens in one workgroup: the tokens' softmax top-k
// over their router logits, as many tokens at once as workgroup memory holds
// (lib/router_top_k_rows.wgsl, as moe_router), then the dispatch's counts, offsets, work items,
// row order and indirect args (lib/moe_dispatch_steps.wgsl, as moe_dispatch). Where moe_router
// and moe_dispatch take two dispatches a layer, this takes one.
// Bytes: tokens * E * 4 read, tokens * k * 8 written, then moe_dispatch's.
//#include "lib/router_top_k_rows.wgsl"
//#include "lib/moe_dispatch_steps.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
  let chunk = router_rows_chunk();
  for (var t0 = 0u; t0 < params.tokens; t0 += chunk) {
    router_top_k_rows(t0, min(chunk, params.tokens - t0), lid);
  }
  // the top-k ids the invocations wrote to storage are visible to the whole workgroup
  storageBarrier();
  dispatch_assignments(lid, 0u, params.tokens * params.top_k);
}
