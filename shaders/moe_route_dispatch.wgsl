// MoE routing and dispatch of a step of few tokens in one workgroup: each token's softmax top-k
// over its router logits in turn (lib/router_top_k.wgsl, as moe_router), then the dispatch's
// counts, offsets, work items, row order and indirect args (lib/moe_dispatch_steps.wgsl, as
// moe_dispatch). Where moe_router and moe_dispatch take two dispatches a layer, this takes one:
// a batch-1 decode step records 48 dispatches fewer (its host encode and submit are most of
// what a batch-1 step's wall adds to its GPU time).
// Bytes: tokens * E * 4 read, tokens * k * 8 written, then moe_dispatch's.
//#include "lib/workgroup_sum.wgsl"
//#include "lib/router_top_k.wgsl"
//#include "lib/moe_dispatch_steps.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
  let num_e = params.experts;
  for (var t = 0u; t < params.tokens; t++) {
    for (var e = lid; e < num_e; e += WG) {
      router_logit[e] = logits[t * num_e + e];
    }
    router_top_k(t, lid);
    // every read of this token's logits and top-k is done before the next token's writes
    workgroupBarrier();
  }
  // the top-k ids the invocations wrote to storage are visible to the whole workgroup
  storageBarrier();
  dispatch_assignments(lid);
}
