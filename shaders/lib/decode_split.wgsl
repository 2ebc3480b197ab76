// What every split-K decode attention form does first (workgroup = (split, seq, kv head),
// from decode_ids):
// read its sequence's query row and context length, uniform across the workgroup, and write
// a weightless partial (o = 0, lse = NEG) for a split past the end of the context. Needs the
// decode attention bindings (seq_info, part_o, part_lse), WG and NEG.
var<workgroup> wg_query_row: u32;
var<workgroup> wg_context_len: u32;

// (split, seq, kv head) of workgroup `wid` of the grid [num_kv_heads, num_splits, num_seqs]:
// the kv heads of one (split, seq) run side by side, so the K/V rows that share a slot (one
// contiguous run of num_kv_heads * head_dim values) are read at about the same time.
fn decode_ids(wid: vec3<u32>) -> vec3<u32> {
  return vec3<u32>(wid.y, wid.z, wid.x);
}

// (query row, context length) of sequence `seq`; every invocation must call it.
fn decode_seq(seq: u32, lid: u32) -> vec2<u32> {
  if (lid == 0u) {
    wg_query_row = u32(seq_info[seq * 3u] + seq_info[seq * 3u + 1u] - 1);
    wg_context_len = u32(seq_info[seq * 3u + 2u]);
  }
  return vec2<u32>(workgroupUniformLoad(&wg_query_row), workgroupUniformLoad(&wg_context_len));
}

// The partial of a split with no keys: o = 0 and lse = NEG for the group's heads.
fn write_empty_split(seq: u32, split: u32, head0: u32, group: u32, hd4: u32, lid: u32) {
  for (var i = lid; i < group * hd4; i += WG) {
    let at = (seq * params.num_q_heads + head0 + i / hd4) * params.num_splits + split;
    part_o[at * hd4 + i % hd4] = vec4<f32>(0.0);
  }
  if (lid < group) {
    part_lse[(seq * params.num_q_heads + head0 + lid) * params.num_splits + split] = NEG;
  }
}
