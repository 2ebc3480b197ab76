// Merges the split partials of paged_attention_decode (see
// kernels/paged_attention_decode_reduce.ts): workgroup (head, seq) weighs each split's
// normalised output by exp(lse - max lse) over the splits that hold keys of the sequence.
const NEG: f32 = -1.0e30;

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
  for (var i = 0u; i < n; i++) {
    m = max(m, part_lse[base + i]);
  }
  for (var c = lid; c < hd4; c += WG) {
    var acc = vec4<f32>(0.0);
    var wsum = 0.0;
    for (var i = 0u; i < n; i++) {
      let w = exp(part_lse[base + i] - m);
      acc += w * part_o[(base + i) * hd4 + c];
      wsum += w;
    }
    out[(query_row * params.num_q_heads + head) * hd4 + c] = acc / wsum;
  }
}
