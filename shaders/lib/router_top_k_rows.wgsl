// The router's softmax top-k of several tokens at once, in one workgroup (moe_route_dispatch):
// tokens t0 .. t0 + n - 1 have their logits staged in workgroup memory (n * E at most
// ROW_LOGITS), one invocation ranks each (token, expert) pair against the token's E logits
// (ties to the lower expert index, lib/router_order.wgsl: the expert of rank r < k is the one
// with r experts ahead of it), and one invocation a (token, slot) writes the slot's weight:
// the softmax probability, or that probability renormalized over the top k when
// params.norm_topk != 0. Where lib/router_top_k.wgsl takes the tokens one after another, with
// every invocation on one token's experts, a step of several tokens pays one staging load and
// three barriers a chunk instead of each a token. The including shader binds logits, topk_ids
// and topk_weights, has params.{experts, top_k, norm_topk} and the consts WG, ROW_LOGITS and
// TOP_SLOTS; every invocation calls it (uniform control flow).
//#include "lib/router_order.wgsl"
var<workgroup> rows_logit: array<f32, ROW_LOGITS>;
var<workgroup> rows_top: array<f32, TOP_SLOTS>;

// Tokens a chunk takes: as many as both arrays hold (E <= 512 and k <= 16: at least 2).
fn router_rows_chunk() -> u32 {
  return min(ROW_LOGITS / params.experts, TOP_SLOTS / params.top_k);
}

fn router_top_k_rows(t0: u32, n: u32, lid: u32) {
  let num_e = params.experts;
  let k = params.top_k;
  for (var i = lid; i < n * num_e; i += WG) {
    rows_logit[i] = logits[t0 * num_e + i];
  }
  workgroupBarrier();
  for (var i = lid; i < n * num_e; i += WG) {
    let t = i / num_e;
    let e = i % num_e;
    let row = t * num_e;
    let v = rows_logit[i];
    var ahead = 0u;
    for (var j = 0u; j < num_e; j++) {
      if (ranked_ahead(rows_logit[row + j], j, v, e)) {
        ahead++;
      }
    }
    if (ahead < k) {
      rows_top[t * k + ahead] = v;
      topk_ids[(t0 + t) * k + ahead] = i32(e);
    }
  }
  workgroupBarrier();
  for (var i = lid; i < n * k; i += WG) {
    let t = i / k;
    // the rank-0 expert's logit is the token's max
    let row_max = rows_top[t * k];
    var denom = 0.0;
    if (params.norm_topk != 0u) {
      for (var j = 0u; j < k; j++) {
        denom += exp(rows_top[t * k + j] - row_max);
      }
    } else {
      for (var e = 0u; e < num_e; e++) {
        denom += exp(rows_logit[t * num_e + e] - row_max);
      }
    }
    topk_weights[(t0 + t) * k + i % k] = exp(rows_top[i] - row_max) / denom;
  }
  // every read of this chunk is done before the next chunk's staging
  workgroupBarrier();
}
