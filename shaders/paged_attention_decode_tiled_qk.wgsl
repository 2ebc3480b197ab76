// Split-K paged decode attention, tiled through workgroup memory (lib/decode_tiled_main.wgsl),
// with qk_norm_rope_cache's work for the step's query tokens inside it (lib/decode_q_qkv.wgsl):
// see kernels/paged_attention_decode_qk.ts.
//#include "lib/paged_kv.wgsl"
//#include "lib/decode_split.wgsl"
//#include "lib/decode_q_qkv.wgsl"
//#include "lib/decode_tiled_main.wgsl"

var<workgroup> wg_qk: array<f32, QK_SCRATCH>;

fn qk_scratch_store(i: u32, v: f32) {
  wg_qk[i] = v;
}

fn qk_scratch(i: u32) -> f32 {
  return wg_qk[i];
}

fn q_norm4(c: u32) -> vec4<f32> {
  return t4(q_norm[c]);
}

fn k_norm4(c: u32) -> vec4<f32> {
  return t4(k_norm[c]);
}

// Column lid (below head_dim / 4) of the new key's K and V, stored as T at vec4 `at`.
fn put_new_kv(at: u32, lid: u32, k: vec4<f32>, v: vec4<f32>) {
  if (lid < params.head_dim / 4u) {
    // (clamped to T's range: an f16 cache keeps an outlier finite)
    k_cache[at + lid] = vec4<T>(clamp(k, vec4<f32>(-T_MAX), vec4<f32>(T_MAX)));
    v_cache[at + lid] = vec4<T>(clamp(v, vec4<f32>(-T_MAX), vec4<f32>(T_MAX)));
  }
}
