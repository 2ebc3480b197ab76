// moe_router_logits in one pass over registers, for devices whose subgroups hold a lane group:
// workgroup (g, t) takes experts g * EG .. g * EG + EG - 1 of token t, one lane group of LG
// invocations an expert (WG = EG * LG). Each lane reads its words k = lane, lane + LG, ... of
// the token's residual row x (plus the o projection's split-K partial sums, as in
// moe_router_logits.wgsl), of the norm weight and of its expert's router row, UNR of each in
// flight, and adds up both the row's squares and its dot product with the expert's row:
//   logits[t, e] = rsqrt(mean(x[t, :]^2) + eps) * sum_i x[t, i] * norm_weight[i] * w[e, i]
// A lane group's words cover the whole row, so each group has the row's sum of squares itself
// (lane_group_sum: subgroup shuffles): no workgroup memory, no barrier, and the router's weight
// loads are in flight from the kernel's start, where moe_router_logits.wgsl first sums the
// squares in a tree of barriers and only then reads the weights. Every group sums in the same
// order, so the scale is the same bits in each; workgroup 0 then writes the normed row
//   out[t, :] = x[t, :] * scale * norm_weight
// (the same expression as moe_router_logits', which the expert GEMMs read), from the words its
// lanes hold where one round of UNR words a lane covers the row (Qwen3-30B-A3B: 256 words, 32
// lanes of 8).
//#include "lib/f16_words.wgsl"
//#include "lib/lane_group_sum.wgsl"
//#include "lib/residual_with_partials.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let words = params.hidden / 8u;
  let t = wid.y;
  let lane = lid % LG;
  let pair = wid.x * EG + lid / LG;
  // (a group past the last expert sums the last expert's row and writes nothing)
  let wo = min(pair, params.experts - 1u) * words;
  let row = t * 2u * words;
  var dotp = 0.0;
  var ss = 0.0;
  // (declared outside the loop: where one round covers the row, they still hold it after)
  var wv = array<vec4<u32>, UNR>();
  var gv = array<vec4<u32>, UNR>();
  var lo = array<vec4<f32>, UNR>();
  var hi = array<vec4<f32>, UNR>();
  for (var k0 = lane; k0 < words; k0 += LG * UNR) {
    for (var u = 0u; u < UNR; u++) {
      let k = min(k0 + u * LG, words - 1u);
      wv[u] = w[wo + k];
      gv[u] = norm_weight[k];
      lo[u] = xin(row + 2u * k);
      hi[u] = xin(row + 2u * k + 1u);
    }
    for (var u = 0u; u < UNR; u++) {
      if (k0 + u * LG < words) {
        let g_lo = lo[u] * f16x4(gv[u].x, gv[u].y);
        let g_hi = hi[u] * f16x4(gv[u].z, gv[u].w);
        dotp += dot(g_lo, f16x4(wv[u].x, wv[u].y)) + dot(g_hi, f16x4(wv[u].z, wv[u].w));
        ss += dot(lo[u], lo[u]) + dot(hi[u], hi[u]);
      }
    }
  }
  let scale = inverseSqrt(lane_group_sum(ss) / f32(params.hidden) + params.eps);
  let logit = lane_group_sum(dotp) * scale;
  if (lane == 0u && pair < params.experts) {
    logits[t * params.experts + pair] = logit;
  }
  // the normed row, from workgroup 0: where one round covered the row, lane group q writes
  // its words of rounds u = q, q + EG, ... from its registers (u a constant in each unrolled
  // step: no array indexed at run time); else its invocations take word k = lid, lid + WG, ...
  if (wid.x == 0u) {
    if (words <= LG * UNR) {
      let q = lid / LG;
      for (var u = 0u; u < UNR; u++) {
        let k = lane + u * LG;
        if (u % EG == q && k < words) {
          out[row + 2u * k] = lo[u] * scale * f16x4(gv[u].x, gv[u].y);
          out[row + 2u * k + 1u] = hi[u] * scale * f16x4(gv[u].z, gv[u].w);
        }
      }
    } else {
      for (var k = lid; k < words; k += WG) {
        let g = norm_weight[k];
        out[row + 2u * k] = xin(row + 2u * k) * scale * f16x4(g.x, g.y);
        out[row + 2u * k + 1u] = xin(row + 2u * k + 1u) * scale * f16x4(g.z, g.w);
      }
    }
  }
}
