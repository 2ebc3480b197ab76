// Split-K paged attention for decode, tiled through workgroup memory (flash-decoding
// form; same bindings, params and outputs as paged_attention_decode.wgsl). Workgroup
// (split, seq, kv head) walks its split's keys TK at a time:
//   1. the tile's K rows are staged with coalesced vec4 loads (a warp reads whole rows),
//   2. every (head, key) score of the GQA group from workgroup memory (rows padded by one
//      vec4 so the key-strided reads of a quarter-warp hit distinct banks),
//   3. an online softmax per head (running max and sum, rescale of the partial output),
//   4. the tile's V rows are staged the same way and P V accumulated per (head, column).
// Each K/V row is read from memory once for all G query heads. One split: the normalised
// output goes to `out`; several: the split's output and log-sum-exp go to part_o/part_lse.
//#include "lib/paged_kv.wgsl"
//#include "lib/decode_split.wgsl"

const HD4: u32 = MAX_HD / 4u;
const KS: u32 = HD4 + 1u; // padded row stride of kv_sh, in vec4
const TK: u32 = 32u; // keys per tile
const NEG: f32 = -1.0e30;

var<workgroup> q_sh: array<vec4<f32>, GMAX * HD4>; // [g][c], scaled, 0 beyond the group
var<workgroup> kv_sh: array<vec4<f32>, TK * KS>; // [key][c] of the current K or V tile
var<workgroup> p_sh: array<f32, GMAX * TK>; // [g][key]: scores, then probabilities
var<workgroup> m_sh: array<f32, GMAX>; // running max per head
var<workgroup> l_sh: array<f32, GMAX>; // running sum per head
var<workgroup> alpha_sh: array<f32, GMAX>; // this tile's rescale of the partial output

fn stage_tile(seq: u32, kvh: u32, first: u32, nt: u32, lid: u32, is_v: bool) {
  let hd4 = params.head_dim / 4u;
  for (var e = lid; e < TK * hd4; e += WG) {
    let key = e / hd4;
    let c = e % hd4;
    var v = vec4<f32>(0.0);
    if (key < nt) {
      let at = paged_kv_base(seq, first + key, kvh) + c;
      if (is_v) {
        v = t4(v_cache[at]);
      } else {
        v = t4(k_cache[at]);
      }
    }
    kv_sh[key * KS + c] = v;
  }
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let split = wid.x;
  let seq = wid.y;
  let kvh = wid.z;
  let group = params.num_q_heads / params.num_kv_heads;
  let hd4 = params.head_dim / 4u;
  let head0 = kvh * group;
  let bounds = decode_seq(seq, lid);
  let query_row = bounds.x;
  let context_len = bounds.y;
  let key_start = split * params.split_tokens;
  if (key_start >= context_len) {
    write_empty_split(seq, split, head0, group, hd4, lid);
    return;
  }
  let n_keys = min(context_len, key_start + params.split_tokens) - key_start;

  for (var i = lid; i < GMAX * HD4; i += WG) {
    let g = i / HD4;
    let c = i % HD4;
    var v = vec4<f32>(0.0);
    if (g < group && c < hd4) {
      v = q[(query_row * params.num_q_heads + head0 + g) * hd4 + c] * params.scale;
    }
    q_sh[i] = v;
  }
  if (lid < GMAX) {
    m_sh[lid] = NEG;
    l_sh[lid] = 0.0;
  }
  // This invocation's outputs: (g, c) for o = lid, lid + WG, ... < GMAX * HD4.
  var acc = array<vec4<f32>, OUT_PER_THREAD>();
  workgroupBarrier();

  for (var t0 = 0u; t0 < n_keys; t0 += TK) {
    let nt = min(TK, n_keys - t0);
    stage_tile(seq, kvh, key_start + t0, nt, lid, false);
    workgroupBarrier();
    for (var s = lid; s < GMAX * TK; s += WG) {
      let g = s / TK;
      let key = s % TK;
      var score = NEG;
      if (g < group && key < nt) {
        var d = vec4<f32>(0.0);
        for (var c = 0u; c < hd4; c++) {
          d += q_sh[g * HD4 + c] * kv_sh[key * KS + c];
        }
        score = d.x + d.y + d.z + d.w;
      }
      p_sh[s] = score;
    }
    workgroupBarrier();
    if (lid < group) {
      let m_old = m_sh[lid];
      var mx = m_old;
      for (var key = 0u; key < nt; key++) {
        mx = max(mx, p_sh[lid * TK + key]);
      }
      var sum = 0.0;
      for (var key = 0u; key < TK; key++) {
        var p = 0.0;
        if (key < nt) {
          p = exp(p_sh[lid * TK + key] - mx);
        }
        p_sh[lid * TK + key] = p;
        sum += p;
      }
      let alpha = exp(m_old - mx);
      alpha_sh[lid] = alpha;
      l_sh[lid] = l_sh[lid] * alpha + sum;
      m_sh[lid] = mx;
    }
    workgroupBarrier();
    stage_tile(seq, kvh, key_start + t0, nt, lid, true);
    workgroupBarrier();
    for (var r = 0u; r < OUT_PER_THREAD; r++) {
      let o = lid + r * WG;
      let g = o / HD4;
      let c = o % HD4;
      if (g < group && c < hd4) {
        var a = acc[r] * alpha_sh[g];
        for (var key = 0u; key < nt; key++) {
          a += p_sh[g * TK + key] * kv_sh[key * KS + c];
        }
        acc[r] = a;
      }
    }
    workgroupBarrier();
  }

  for (var r = 0u; r < OUT_PER_THREAD; r++) {
    let o = lid + r * WG;
    let g = o / HD4;
    let c = o % HD4;
    if (g < group && c < hd4) {
      let l = l_sh[g];
      let res = acc[r] / l;
      if (params.num_splits == 1u) {
        out[(query_row * params.num_q_heads + head0 + g) * hd4 + c] = res;
      } else {
        let at = (seq * params.num_q_heads + head0 + g) * params.num_splits + split;
        part_o[at * hd4 + c] = res;
        if (c == 0u) {
          part_lse[at] = m_sh[g] + log(l);
        }
      }
    }
  }
}
