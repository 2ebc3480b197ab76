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
// The group is padded to GMAX = 8 heads (zero queries beyond G) and held in vec4 pairs and
// named registers, never in indexed private arrays (which drivers may spill to memory).
//#include "lib/paged_kv.wgsl"
//#include "lib/decode_split.wgsl"

const_assert GMAX == 8u;
const HD4: u32 = MAX_HD / 4u;
// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;

var<workgroup> q_sh: array<vec4<f32>, 8u * HD4>; // [g, d / 4], scaled queries, 0 for g >= G
var<workgroup> scores: array<vec4<f32>, SCORES / 4u>; // [key, g / 4], scores then probabilities
var<workgroup> red: array<vec4<f32>, 2u * WG>; // [thread, g / 4]
var<workgroup> red_o: array<vec4<f32>, WG>; // [key group, d / 4]

// Sums one head's output over the key groups and writes it (every invocation calls it).
fn write_head(g: u32, o: vec4<f32>, l: f32, m: f32, lid: u32, d: DecodeSplit) {
  let hd4 = d.hd4;
  let col = lid % hd4;
  let kg = lid / hd4;
  red_o[lid] = o;
  workgroupBarrier();
  if (kg == 0u) {
    var acc = red_o[col];
    for (var k = 1u; k < WG / hd4; k++) {
      acc += red_o[k * hd4 + col];
    }
    let res = acc / l;
    let head = d.head0 + g;
    if (params.num_splits == 1u) {
      out[(d.query_row * params.num_q_heads + head) * hd4 + col] = res;
    } else {
      let at = (d.seq * params.num_q_heads + head) * params.num_splits + d.split;
      part_o[at * hd4 + col] = res;
      if (col == 0u) {
        part_lse[at] = m + log(l);
      }
    }
  }
  workgroupBarrier();
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let ds = decode_split(wid, lid);
  if (ds.key_start >= ds.key_end) {
    write_empty_split(ds, lid);
    return;
  }
  let n_keys = ds.key_end - ds.key_start;

  for (var i = lid; i < 8u * ds.hd4; i += WG) {
    let g = i / ds.hd4;
    let c = i % ds.hd4;
    var v = vec4<f32>(0.0);
    if (g < ds.group) {
      v = q[(ds.query_row * params.num_q_heads + ds.head0 + g) * ds.hd4 + c] * params.scale;
    }
    q_sh[g * HD4 + c] = v;
  }
  workgroupBarrier();

  // 1. Scores, heads 0..3 in .xyzw of the low vec4 and 4..7 of the high one.
  var mx_lo = vec4<f32>(NEG);
  var mx_hi = vec4<f32>(NEG);
  for (var j = lid; j < n_keys; j += WG) {
    let base = paged_kv_base(ds.seq, ds.key_start + j, ds.kvh);
    var s_lo = vec4<f32>(0.0);
    var s_hi = vec4<f32>(0.0);
    for (var c = 0u; c < ds.hd4; c++) {
      let kv = t4(k_cache[base + c]);
      s_lo += vec4<f32>(
        dot(q_sh[c], kv),
        dot(q_sh[HD4 + c], kv),
        dot(q_sh[2u * HD4 + c], kv),
        dot(q_sh[3u * HD4 + c], kv),
      );
      s_hi += vec4<f32>(
        dot(q_sh[4u * HD4 + c], kv),
        dot(q_sh[5u * HD4 + c], kv),
        dot(q_sh[6u * HD4 + c], kv),
        dot(q_sh[7u * HD4 + c], kv),
      );
    }
    scores[2u * j] = s_lo;
    scores[2u * j + 1u] = s_hi;
    mx_lo = max(mx_lo, s_lo);
    mx_hi = max(mx_hi, s_hi);
  }

  // 2. Max and sum per head over the ds.split.
  red[2u * lid] = mx_lo;
  red[2u * lid + 1u] = mx_hi;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
    if (lid < stride) {
      red[2u * lid] = max(red[2u * lid], red[2u * (lid + stride)]);
      red[2u * lid + 1u] = max(red[2u * lid + 1u], red[2u * (lid + stride) + 1u]);
    }
    workgroupBarrier();
  }
  let m_lo = red[0];
  let m_hi = red[1];
  workgroupBarrier();
  var sm_lo = vec4<f32>(0.0);
  var sm_hi = vec4<f32>(0.0);
  for (var j = lid; j < n_keys; j += WG) {
    let p_lo = exp(scores[2u * j] - m_lo);
    let p_hi = exp(scores[2u * j + 1u] - m_hi);
    scores[2u * j] = p_lo;
    scores[2u * j + 1u] = p_hi;
    sm_lo += p_lo;
    sm_hi += p_hi;
  }
  red[2u * lid] = sm_lo;
  red[2u * lid + 1u] = sm_hi;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
    if (lid < stride) {
      red[2u * lid] += red[2u * (lid + stride)];
      red[2u * lid + 1u] += red[2u * (lid + stride) + 1u];
    }
    workgroupBarrier();
  }
  let l_lo = red[0];
  let l_hi = red[1];

  // 3. O = P V: thread (col, key ds.group kg) over keys kg, kg + WG / ds.hd4, ...
  let col = lid % ds.hd4;
  let kg = lid / ds.hd4;
  let nkg = WG / ds.hd4;
  var o0 = vec4<f32>(0.0);
  var o1 = vec4<f32>(0.0);
  var o2 = vec4<f32>(0.0);
  var o3 = vec4<f32>(0.0);
  var o4 = vec4<f32>(0.0);
  var o5 = vec4<f32>(0.0);
  var o6 = vec4<f32>(0.0);
  var o7 = vec4<f32>(0.0);
  for (var j = kg; j < n_keys; j += nkg) {
    let v = t4(v_cache[paged_kv_base(ds.seq, ds.key_start + j, ds.kvh) + col]);
    let p_lo = scores[2u * j];
    let p_hi = scores[2u * j + 1u];
    o0 += p_lo.x * v;
    o1 += p_lo.y * v;
    o2 += p_lo.z * v;
    o3 += p_lo.w * v;
    o4 += p_hi.x * v;
    o5 += p_hi.y * v;
    o6 += p_hi.z * v;
    o7 += p_hi.w * v;
  }
  write_head(0u, o0, l_lo.x, m_lo.x, lid, ds);
  if (ds.group > 1u) {
    write_head(1u, o1, l_lo.y, m_lo.y, lid, ds);
  }
  if (ds.group > 2u) {
    write_head(2u, o2, l_lo.z, m_lo.z, lid, ds);
  }
  if (ds.group > 3u) {
    write_head(3u, o3, l_lo.w, m_lo.w, lid, ds);
  }
  if (ds.group > 4u) {
    write_head(4u, o4, l_hi.x, m_hi.x, lid, ds);
  }
  if (ds.group > 5u) {
    write_head(5u, o5, l_hi.y, m_hi.y, lid, ds);
  }
  if (ds.group > 6u) {
    write_head(6u, o6, l_hi.z, m_hi.z, lid, ds);
  }
  if (ds.group > 7u) {
    write_head(7u, o7, l_hi.w, m_hi.w, lid, ds);
  }
}
