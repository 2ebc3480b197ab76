// The MoE router's logits with the layer's input RMSNorm fused, spread over the GPU: workgroup
// (g, b) takes experts g * EG .. g * EG + EG - 1 for tokens b * TB .. b * TB + TB - 1, LANES
// invocations each (expert, token) pair (WG = EG * TB * LANES). Where the one-pass routers
// give a token one workgroup, which reads the whole router weight alone (512 KB at
// Qwen3-30B-A3B: about 17 us a layer on the H200 at every batch), each workgroup here reads
// EG weight rows and TB residual rows, and moe_router ranks the logits after it.
//   1. each token's mean square: WG / TB invocations a token, a tree sum in `part`
//   2. the first expert group's workgroups write the normed rows
//        out[t, :] = x[t, :] * rsqrt(mean(x[t, :]^2) + eps) * norm_weight
//      (the expert GEMMs read them; the same expression as moe_router_norm's)
//   3. each pair's lanes take its 16-byte weight words (8 f16) lane, lane + LANES, ..., UNR of
//      them in flight, against the same words of the token's normed row, formed from x in the
//      same expression as in 2, so the logits are out[t] . w[e]
//   4. the LANES partial sums of each pair meet in a tree in `part`.
// One accumulator a lane and no array indexed in a loop (the driver moves those to memory).
// With params.partials > 0 the residual row is x plus the split-K partial sums an o projection
// left (o_part: [partials, tokens, hidden / 4], added in order after x) wherever x is read; this
// writes no residual back (every workgroup reads it), so the kernel after it adds them too.
// Bytes: E * hidden * 2 + hidden * 2 + tokens * (hidden * 8 + E * 4).
//#include "lib/f16_words.wgsl"
//#include "lib/residual_with_partials.wgsl"

var<workgroup> part: array<f32, WG>;
var<workgroup> scales: array<f32, TB>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let words = params.hidden / 8u;
  let t0 = wid.y * TB;

  // 1. mean squares (the invocations of a token beyond the step sum nothing)
  let per_token = WG / TB;
  let tl = lid / per_token;
  let p = lid % per_token;
  var ss = 0.0;
  if (t0 + tl < params.tokens) {
    let row = (t0 + tl) * 2u * words;
    for (var i = p; i < 2u * words; i += per_token) {
      let v = xin(row + i);
      ss += dot(v, v);
    }
  }
  part[lid] = ss;
  workgroupBarrier();
  for (var stride = per_token / 2u; stride > 0u; stride /= 2u) {
    if (p < stride) {
      part[lid] += part[lid + stride];
    }
    workgroupBarrier();
  }
  if (p == 0u) {
    scales[tl] = inverseSqrt(part[lid] / f32(params.hidden) + params.eps);
  }
  workgroupBarrier();

  // 2. the normed rows
  if (wid.x == 0u) {
    for (var t = 0u; t < TB; t++) {
      let tok = t0 + t;
      if (tok >= params.tokens) {
        break;
      }
      let row = tok * 2u * words;
      let scale = scales[t];
      for (var i = lid; i < words; i += WG) {
        let g = norm_weight[i];
        out[row + 2u * i] = xin(row + 2u * i) * scale * f16x4(g.x, g.y);
        out[row + 2u * i + 1u] = xin(row + 2u * i + 1u) * scale * f16x4(g.z, g.w);
      }
    }
  }

  // 3. this lane's part of its pair's logit (a pair of a token beyond the step is not
  // written; it reads the last token's row)
  let pair = lid / LANES;
  let s = lid % LANES;
  let e = wid.x * EG + pair / TB;
  let t = pair % TB;
  let row = min(t0 + t, params.tokens - 1u) * 2u * words;
  let scale = scales[t];
  var acc = 0.0;
  if (e < params.experts) {
    let wo = e * words;
    for (var k0 = s; k0 < words; k0 += LANES * UNR) {
      var wv = array<vec4<u32>, UNR>();
      var gv = array<vec4<u32>, UNR>();
      var lo = array<vec4<f32>, UNR>();
      var hi = array<vec4<f32>, UNR>();
      for (var u = 0u; u < UNR; u++) {
        let k = min(k0 + u * LANES, words - 1u);
        wv[u] = w[wo + k];
        gv[u] = norm_weight[k];
        lo[u] = xin(row + 2u * k);
        hi[u] = xin(row + 2u * k + 1u);
      }
      for (var u = 0u; u < UNR; u++) {
        if (k0 + u * LANES < words) {
          let n_lo = lo[u] * scale * f16x4(gv[u].x, gv[u].y);
          let n_hi = hi[u] * scale * f16x4(gv[u].z, gv[u].w);
          acc += dot(n_lo, f16x4(wv[u].x, wv[u].y)) + dot(n_hi, f16x4(wv[u].z, wv[u].w));
        }
      }
    }
  }

  // 4. the lanes' sums (the tree's barriers also order step 1's last reads of `part`)
  part[lid] = acc;
  workgroupBarrier();
  for (var stride = LANES / 2u; stride > 0u; stride /= 2u) {
    if (s < stride) {
      part[lid] += part[lid + stride];
    }
    workgroupBarrier();
  }
  if (s == 0u && e < params.experts && t0 + t < params.tokens) {
    logits[(t0 + t) * params.experts + e] = part[lid];
  }
}
