// What every split-K decode attention form does first: find its workgroup's split (grid
// [num_kv_heads, num_splits, num_seqs], decode_split), and write a weightless partial (o = 0,
// lse = NEG) for a split past the end of the context (write_empty_split). Needs the decode
// attention bindings (seq_info, part_o, part_lse), WG and NEG.
//#include "lib/decode_split_struct.wgsl"
var<workgroup> wg_query_row: u32;
var<workgroup> wg_context_len: u32;

// The split of workgroup `wid`. The kv heads of one (split, seq) run side by side, so the K/V
// rows that share a slot (one contiguous run of num_kv_heads * head_dim values) are read at
// about the same time. Every invocation must call it (the sequence is read through
// workgroup memory).
fn decode_split(wid: vec3<u32>, lid: u32) -> DecodeSplit {
  let seq = wid.z;
  if (lid == 0u) {
    wg_query_row = u32(seq_info[seq * 3u] + seq_info[seq * 3u + 1u] - 1);
    wg_context_len = u32(seq_info[seq * 3u + 2u]);
  }
  let context_len = workgroupUniformLoad(&wg_context_len);
  let group = params.num_q_heads / params.num_kv_heads;
  let key_start = wid.y * params.split_tokens;
  return DecodeSplit(
    wid.y,
    seq,
    wid.x,
    group,
    wid.x * group,
    params.head_dim / 4u,
    workgroupUniformLoad(&wg_query_row),
    context_len,
    key_start,
    min(context_len, key_start + params.split_tokens),
  );
}

// The partial of a split with no keys: o = 0 and lse = NEG for the group's heads.
fn write_empty_split(d: DecodeSplit, lid: u32) {
  for (var i = lid; i < d.group * d.hd4; i += WG) {
    let at = (d.seq * params.num_q_heads + d.head0 + i / d.hd4) * params.num_splits + d.split;
    part_o[at * d.hd4 + i % d.hd4] = vec4<f32>(0.0);
  }
  if (lid < d.group) {
    part_lse[(d.seq * params.num_q_heads + d.head0 + lid) * params.num_splits + d.split] = NEG;
  }
}
