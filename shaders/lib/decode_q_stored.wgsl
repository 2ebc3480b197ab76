// How a decode attention form gets its query (the hooks of lib/decode_tiled_main.wgsl): here
// as qk_norm_rope_cache stored it in `q`, the new key's K and V already in the cache.

// The split that holds the new key writes its K and V first (not here: the cache holds them).
fn decode_new_kv(d: DecodeSplit, lid: u32) {}

// Whatever decode_q needs that the whole workgroup computes (nothing here).
fn decode_q_prepare(d: DecodeSplit, lid: u32) {}

// vec4 column c of query head head0 + g, unscaled.
fn decode_q(d: DecodeSplit, g: u32, c: u32) -> vec4<f32> {
  return q[(d.query_row * params.num_q_heads + d.head0 + g) * d.hd4 + c];
}
