// MoE router in one pass for decode-sized steps, one workgroup per token: the token's router
// logits (x . w[e] for every expert, f32 sums; written out too), then the softmax top-k of
// moe_router (lib/router_top_k.wgsl), where the GEMV of the router weight and moe_router
// took two dispatches and a round trip of the logits through memory.
// The token's x row goes to workgroup memory first (one coalesced pass). Invocation lid then
// takes expert lid / S of each pass of WG / S experts and the 16-byte words lid % S,
// lid % S + S, ... of its weight row (8 f16 a word; S consecutive invocations a row, the
// largest power of two with every expert in one pass, at least 1 (more experts than WG take
// several passes), at most the row's words: their loads cover S consecutive words), UNR words
// in flight; the S partial sums meet in workgroup memory. The router weight (E x hidden) is read once a token, from cache after the first.
// On the H200 a first form that read x from memory beside 8-byte weight words took 30 us a
// layer in the profile at 1 token (the GEMV and moe_router 25).
// Bytes: E * hidden * 2 + tokens * (hidden * 4 + E * 4 + k * 8).
//#include "lib/workgroup_sum.wgsl"
//#include "lib/router_top_k.wgsl"

var<workgroup> part: array<f32, WG>;
var<workgroup> xs: array<vec4<f32>, MAX_H / 4u>;

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
  let words = params.hidden / 8u;
  for (var i = lid; i < 2u * words; i += WG) {
    xs[i] = x[token * 2u * words + i];
  }
  var S = 1u;
  while (S * 2u * num_e <= WG && S * 2u <= words) {
    S *= 2u;
  }
  let per_pass = WG / S;
  let s = lid % S;
  workgroupBarrier();
  for (var e0 = 0u; e0 < num_e; e0 += per_pass) {
    let e = e0 + lid / S;
    var acc = 0.0;
    if (e < num_e) {
      let wo = e * words;
      for (var k0 = s; k0 < words; k0 += S * UNR) {
        var wv = array<vec4<u32>, UNR>();
        for (var u = 0u; u < UNR; u++) {
          wv[u] = w[wo + min(k0 + u * S, words - 1u)];
        }
        for (var u = 0u; u < UNR; u++) {
          let k = k0 + u * S;
          if (k < words) {
            let lo = vec4<f32>(vec2<f32>(bitcast<vec2<f16>>(wv[u].x)), vec2<f32>(bitcast<vec2<f16>>(wv[u].y)));
            let hi = vec4<f32>(vec2<f32>(bitcast<vec2<f16>>(wv[u].z)), vec2<f32>(bitcast<vec2<f16>>(wv[u].w)));
            acc += dot(lo, xs[2u * k]) + dot(hi, xs[2u * k + 1u]);
          }
        }
      }
    }
    part[lid] = acc;
    workgroupBarrier();
    if (lid < per_pass && e0 + lid < num_e) {
      var sum = 0.0;
      for (var j = 0u; j < S; j++) {
        sum += part[lid * S + j];
      }
      router_logit[e0 + lid] = sum;
      logits[token * num_e + e0 + lid] = sum;
    }
    workgroupBarrier();
  }
  router_top_k(token, lid);
}
