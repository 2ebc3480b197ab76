// moe_router_fused with the MoE layer's input RMSNorm (post_attention_layernorm) fused, one
// workgroup per token: the token's residual row x goes to workgroup memory, its mean square
// gives the scale, and the normed row
//   out[t, :] = x[t, :] * rsqrt(mean(x[t, :]^2) + eps) * norm_weight
// is written out (the expert GEMMs read it) and kept in workgroup memory, where
// lib/router_fused_logits.wgsl takes the router logits and their top-k from it. One dispatch a
// layer fewer than rmsnorm and moe_router_fused, and the residual row is read once.
// With splits > 0 the residual still owes the o projection's split-K partial sums
// o_part[s, t, :] (split_stride vec4s apart): they are added to it first, in splitk_reduce's
// order, and the sum is written back to x, so that reduce dispatch is left out too.
// norm_weight is read as 16-byte words (8 f16), like the router weight.
// Bytes: E * hidden * 2 + hidden * 2 + tokens * (hidden * 8 + E * 4 + k * 8).
//#include "lib/f16_words.wgsl"
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
  let row = token * 2u * words;
  var ss = 0.0;
  for (var i = lid; i < 2u * words; i += WG) {
    var v = x[row + i];
    if (params.splits > 0u) {
      for (var s = 0u; s < params.splits; s++) {
        v += o_part[s * params.split_stride + row + i];
      }
      x[row + i] = v;
    }
    xs[i] = v;
    ss += dot(v, v);
  }
  // (its barriers also make every xs write above visible)
  let total = workgroup_sum(ss, lid);
  let scale = inverseSqrt(total / f32(params.hidden) + params.eps);
  for (var i = lid; i < words; i += WG) {
    let g = norm_weight[i];
    let lo = xs[2u * i] * scale * f16x4(g.x, g.y);
    let hi = xs[2u * i + 1u] * scale * f16x4(g.z, g.w);
    xs[2u * i] = lo;
    xs[2u * i + 1u] = hi;
    out[row + 2u * i] = lo;
    out[row + 2u * i + 1u] = hi;
  }
  route_from_xs(token, lid);
}
