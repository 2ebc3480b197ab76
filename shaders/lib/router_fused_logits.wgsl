// The one-pass router's logits and top-k for one token whose hidden row already sits in xs
// (workgroup memory, written by the including entry point, which calls route_from_xs from
// uniform control flow after its writes): invocation lid takes expert lid / S of each pass of
// WG / S experts and the 16-byte words lid % S, lid % S + S, ... of its weight row (8 f16 a
// word; S consecutive invocations a row, the largest power of two with every expert in one
// pass, at least 1 (more experts than WG take several passes), at most the row's words: their
// loads cover S consecutive words), UNR words in flight; the S partial sums meet in workgroup
// memory. The logits are written out, then router_top_k (lib/router_top_k.wgsl) ranks them.
// Needs the bindings w (vec4<u32> words), logits, and those of router_top_k.
var<workgroup> part: array<f32, WG>;
var<workgroup> xs: array<vec4<f32>, MAX_H / 4u>;

fn route_from_xs(token: u32, lid: u32) {
  let num_e = params.experts;
  let words = params.hidden / 8u;
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
