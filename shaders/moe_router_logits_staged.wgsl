// moe_router_logits for steps of several tokens: workgroup (g, t) takes experts
// g * EG .. g * EG + EG - 1 of token t, S = WG / EG invocations an expert. Where the one-pass
// router (moe_router_norm) gives a token one workgroup, which reads the whole router weight
// (512 KB at Qwen3-30B-A3B) at what one SM's loads reach, each workgroup here reads EG rows of it;
// and where the other forms of moe_router_logits have each expert's lanes read the residual row
// (and the o projection's split-K partial sums) again, here it is read once a workgroup into
// workgroup memory:
//   1. xs = the token's residual row (x plus the partial sums, lib/residual_with_partials.wgsl),
//      and its mean square (a tree sum, whose barriers make xs visible); each invocation's first
//      8 weight words are loaded before, so that they are in flight meanwhile
//   2. xs normed in place, xs = x * rsqrt(mean(x^2) + eps) * norm_weight (moe_router_norm's
//      expression), and written to out by the first expert group's workgroups (the expert GEMMs
//      read it)
//   3. each invocation's words k = s, s + S, ... of its expert's row against xs, 8 in flight
//   4. the S partial sums of each expert meet in `part`; the logits out[t] . w[e]
// It writes no residual back (every workgroup reads it): with partials the kernel after adds them.
// Bytes: E * hidden * 2 + hidden * 2 + tokens * (hidden * 8 * (1 + partials) + E * 4).
//#include "lib/f16_words.wgsl"
//#include "lib/residual_with_partials.wgsl"
//#include "lib/workgroup_sum.wgsl"

var<workgroup> xs: array<vec4<f32>, MAX_H / 4u>;
var<workgroup> part: array<f32, WG>;

// word k of an expert's row (8 f16) against the normed row in xs; 0 past the row
fn staged_word_dot(wv: vec4<u32>, k: u32, words: u32) -> f32 {
  if (k >= words) {
    return 0.0;
  }
  return dot(xs[2u * k], f16x4(wv.x, wv.y)) + dot(xs[2u * k + 1u], f16x4(wv.z, wv.w));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let words = params.hidden / 8u;
  let last = words - 1u;
  let t = wid.y;
  let row = t * 2u * words;
  let S = WG / EG;
  let s = lid % S;
  let e = wid.x * EG + lid / S;
  // (an invocation past the last expert reads the last expert's row and writes nothing)
  let wo = min(e, params.experts - 1u) * words;
  var w0 = w[wo + min(s, last)];
  var w1 = w[wo + min(s + S, last)];
  var w2 = w[wo + min(s + 2u * S, last)];
  var w3 = w[wo + min(s + 3u * S, last)];
  var w4 = w[wo + min(s + 4u * S, last)];
  var w5 = w[wo + min(s + 5u * S, last)];
  var w6 = w[wo + min(s + 6u * S, last)];
  var w7 = w[wo + min(s + 7u * S, last)];

  // 1. the residual row and its mean square
  var ss = 0.0;
  for (var i = lid; i < 2u * words; i += WG) {
    let v = xin(row + i);
    xs[i] = v;
    ss += dot(v, v);
  }
  let scale = inverseSqrt(workgroup_sum(ss, lid) / f32(params.hidden) + params.eps);

  // 2. normed in place, out from the first group (step 1's xs writes are visible to every
  // invocation past workgroup_sum's first barrier)
  for (var k = lid; k < words; k += WG) {
    let g = norm_weight[k];
    let lo = xs[2u * k] * scale * f16x4(g.x, g.y);
    let hi = xs[2u * k + 1u] * scale * f16x4(g.z, g.w);
    xs[2u * k] = lo;
    xs[2u * k + 1u] = hi;
    if (wid.x == 0u) {
      out[row + 2u * k] = lo;
      out[row + 2u * k + 1u] = hi;
    }
  }
  workgroupBarrier();

  // 3. this invocation's words of its expert's row, 8 at a time in named registers
  var acc = 0.0;
  for (var k0 = s; k0 < words; k0 += 8u * S) {
    if (k0 > s) {
      w0 = w[wo + min(k0, last)];
      w1 = w[wo + min(k0 + S, last)];
      w2 = w[wo + min(k0 + 2u * S, last)];
      w3 = w[wo + min(k0 + 3u * S, last)];
      w4 = w[wo + min(k0 + 4u * S, last)];
      w5 = w[wo + min(k0 + 5u * S, last)];
      w6 = w[wo + min(k0 + 6u * S, last)];
      w7 = w[wo + min(k0 + 7u * S, last)];
    }
    acc += staged_word_dot(w0, k0, words);
    acc += staged_word_dot(w1, k0 + S, words);
    acc += staged_word_dot(w2, k0 + 2u * S, words);
    acc += staged_word_dot(w3, k0 + 3u * S, words);
    acc += staged_word_dot(w4, k0 + 4u * S, words);
    acc += staged_word_dot(w5, k0 + 5u * S, words);
    acc += staged_word_dot(w6, k0 + 6u * S, words);
    acc += staged_word_dot(w7, k0 + 7u * S, words);
  }

  // 4. the expert's S partial sums, in a tree
  part[lid] = acc;
  workgroupBarrier();
  for (var stride = S / 2u; stride > 0u; stride /= 2u) {
    if (s < stride) {
      part[lid] += part[lid + stride];
    }
    workgroupBarrier();
  }
  if (s == 0u && e < params.experts) {
    logits[t * params.experts + e] = part[lid];
  }
}
