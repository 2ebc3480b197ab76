// Merges the split partials of paged_attention_decode (see
// kernels/paged_attention_decode_reduce.ts): workgroup (head, seq) weighs each split's
// normalised output by exp(lse - max lse) over the splits that hold keys of the sequence.
// Invocations 32 g .. 32 g + 31 (g < SG = WG / 32) take the splits g, g + SG, ... of each run
// of 32 vec4 columns of the head; their sums meet in workgroup memory. With one group (WG 32)
// each invocation walks every split, with no barrier: at 47 splits (8 x 8192 on the H200) a
// chain of 47 loads. With write_f16 each row also goes to out16 in the storage type (clamped
// to f16's range, as cast_f16 writes it): the o projection's tensor-core GEMM reads it with no
// cast dispatch.
//#include "lib/workgroup_max.wgsl"
//#include "lib/clamp_f16.wgsl"
const NEG: f32 = -1.0e30;
const SG: u32 = WG / 32u;
const_assert SG * 32u == WG;

var<workgroup> acc_sh: array<vec4<f32>, WG>;
var<workgroup> w_sh: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let head = wid.x;
  let seq = wid.y;
  let hd4 = params.head_dim / 4u;
  let query_row = u32(seq_info[seq * 3u] + seq_info[seq * 3u + 1u] - 1);
  let context_len = u32(seq_info[seq * 3u + 2u]);
  let n = min(params.num_splits, (context_len + params.split_tokens - 1u) / params.split_tokens);
  let base = (seq * params.num_q_heads + head) * params.num_splits;
  var m = NEG;
  if (SG == 1u) {
    // one group: every invocation takes the max itself (no barriers)
    for (var i = 0u; i < n; i++) {
      m = max(m, part_lse[base + i]);
    }
  } else {
    for (var i = lid; i < n; i += WG) {
      m = max(m, part_lse[base + i]);
    }
    m = workgroup_max(m, lid);
  }
  let g = lid / 32u;
  let lane = lid % 32u;
  for (var c0 = 0u; c0 < hd4; c0 += 32u) {
    let c = c0 + lane;
    var acc = vec4<f32>(0.0);
    var wsum = 0.0;
    if (c < hd4) {
      for (var i = g; i < n; i += SG) {
        let w = exp(part_lse[base + i] - m);
        acc += w * part_o[(base + i) * hd4 + c];
        wsum += w;
      }
    }
    if (SG > 1u) {
      acc_sh[lid] = acc;
      w_sh[lid] = wsum;
      workgroupBarrier();
      if (g == 0u) {
        for (var j = 1u; j < SG; j++) {
          acc += acc_sh[lid + 32u * j];
          wsum += w_sh[lid + 32u * j];
        }
      }
      workgroupBarrier();
    }
    if (g == 0u && c < hd4) {
      let o = (query_row * params.num_q_heads + head) * hd4 + c;
      let v = acc / wsum;
      out[o] = v;
      if (params.write_f16 != 0u) {
        out16[o] = vec4<T>(clamp_f16(v));
      }
    }
  }
}
