// Split-K paged attention for decode (see kernels/paged_attention_decode.ts). Workgroup
// (split, seq, kv head) attends the last query token of `seq` with all G query heads of
// kv head `kvh` over keys [split * split_tokens, +split_tokens) of its context, so each
// K/V row is read once for the whole GQA group:
//   1. scores of every key of the split (one thread per key) into workgroup memory,
//   2. the split's max and sum per head (tree reductions), probabilities in place,
//   3. O = P V with thread (col, key group) owning a vec4 column, then summed over groups.
// One split: the normalised output goes to `out`. Several: the split's normalised output
// and log-sum-exp go to part_o / part_lse for paged_attention_decode_reduce; a split past
// the end of its context writes a weightless partial (o = 0, lse = NEG).
//#include "lib/paged_kv.wgsl"

const HD4: u32 = MAX_HD / 4u;
// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;

var<workgroup> q_sh: array<vec4<f32>, GMAX * HD4>; // [g, d / 4], scaled queries
var<workgroup> scores: array<f32, SCORES>; // [key, g], scores then probabilities
var<workgroup> red: array<f32, GMAX * WG>; // [g, thread]
var<workgroup> red_o: array<vec4<f32>, WG>; // [key group, d / 4]
var<workgroup> wg_query_row: u32;
var<workgroup> wg_context_len: u32;

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
  if (lid == 0u) {
    wg_query_row = u32(seq_info[seq * 3u] + seq_info[seq * 3u + 1u] - 1);
    wg_context_len = u32(seq_info[seq * 3u + 2u]);
  }
  let query_row = workgroupUniformLoad(&wg_query_row);
  let context_len = workgroupUniformLoad(&wg_context_len);
  let key_start = split * params.split_tokens;
  if (key_start >= context_len) {
    for (var i = lid; i < group * hd4; i += WG) {
      let at = (seq * params.num_q_heads + head0 + i / hd4) * params.num_splits + split;
      part_o[at * hd4 + i % hd4] = vec4<f32>(0.0);
    }
    if (lid < group) {
      part_lse[(seq * params.num_q_heads + head0 + lid) * params.num_splits + split] = NEG;
    }
    return;
  }
  let n_keys = min(context_len, key_start + params.split_tokens) - key_start;

  for (var i = lid; i < group * hd4; i += WG) {
    let g = i / hd4;
    let c = i % hd4;
    q_sh[g * HD4 + c] = q[(query_row * params.num_q_heads + head0 + g) * hd4 + c] * params.scale;
  }
  workgroupBarrier();

  var mx = array<f32, GMAX>();
  for (var g = 0u; g < GMAX; g++) {
    mx[g] = NEG;
  }
  for (var j = lid; j < n_keys; j += WG) {
    let base = paged_kv_base(seq, key_start + j, kvh);
    var s = array<f32, GMAX>();
    for (var c = 0u; c < hd4; c++) {
      let kv = vec4<f32>(k_cache[base + c]);
      for (var g = 0u; g < GMAX; g++) {
        if (g < group) {
          s[g] += dot(q_sh[g * HD4 + c], kv);
        }
      }
    }
    for (var g = 0u; g < GMAX; g++) {
      if (g < group) {
        scores[j * group + g] = s[g];
        mx[g] = max(mx[g], s[g]);
      }
    }
  }
  for (var g = 0u; g < GMAX; g++) {
    red[g * WG + lid] = mx[g];
  }
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
    if (lid < stride) {
      for (var g = 0u; g < GMAX; g++) {
        if (g < group) {
          red[g * WG + lid] = max(red[g * WG + lid], red[g * WG + lid + stride]);
        }
      }
    }
    workgroupBarrier();
  }
  var m = array<f32, GMAX>();
  for (var g = 0u; g < GMAX; g++) {
    m[g] = red[g * WG];
  }
  workgroupBarrier();

  var sm = array<f32, GMAX>();
  for (var j = lid; j < n_keys; j += WG) {
    for (var g = 0u; g < GMAX; g++) {
      if (g < group) {
        let p = exp(scores[j * group + g] - m[g]);
        scores[j * group + g] = p;
        sm[g] += p;
      }
    }
  }
  for (var g = 0u; g < GMAX; g++) {
    red[g * WG + lid] = sm[g];
  }
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
    if (lid < stride) {
      for (var g = 0u; g < GMAX; g++) {
        if (g < group) {
          red[g * WG + lid] += red[g * WG + lid + stride];
        }
      }
    }
    workgroupBarrier();
  }
  var l = array<f32, GMAX>();
  for (var g = 0u; g < GMAX; g++) {
    l[g] = red[g * WG];
  }

  let col = lid % hd4;
  let kg = lid / hd4;
  let nkg = WG / hd4;
  var o = array<vec4<f32>, GMAX>();
  for (var j = kg; j < n_keys; j += nkg) {
    let v = vec4<f32>(v_cache[paged_kv_base(seq, key_start + j, kvh) + col]);
    for (var g = 0u; g < GMAX; g++) {
      if (g < group) {
        o[g] += scores[j * group + g] * v;
      }
    }
  }
  for (var g = 0u; g < GMAX; g++) {
    if (g < group) {
      red_o[lid] = o[g];
      workgroupBarrier();
      if (kg == 0u) {
        var acc = red_o[col];
        for (var k = 1u; k < nkg; k++) {
          acc += red_o[k * hd4 + col];
        }
        let res = acc / l[g];
        let head = head0 + g;
        if (params.num_splits == 1u) {
          out[(query_row * params.num_q_heads + head) * hd4 + col] = res;
        } else {
          let at = (seq * params.num_q_heads + head) * params.num_splits + split;
          part_o[at * hd4 + col] = res;
          if (col == 0u) {
            part_lse[at] = m[g] + log(l[g]);
          }
        }
      }
      workgroupBarrier();
    }
  }
}
