// Split-K paged decode attention on f16 subgroup matrices, the head's dims split among
// subgroups (lib/decode_tcdw2_main.wgsl), with qk_norm_rope_cache's work for the step's query
// tokens inside it (lib/decode_q_qkv.wgsl): see kernels/paged_attention_decode_qk.ts. The
// scratch is the front of wg.s_tile (free until the first step's S is stored; a separate
// workgroup variable is what paged_attention_tc.wgsl says the H200's driver got wrong beside
// subgroup matrices), the norm weights and the cache are 16-byte words of 8 f16.
//#include "lib/paged_kv.wgsl"
//#include "lib/stage_words.wgsl"
//#include "lib/attention_steps_tc.wgsl"
//#include "lib/decode_split_struct.wgsl"
//#include "lib/decode_q_qkv.wgsl"
//#include "lib/decode_tcdw2_main.wgsl"

const_assert QK_SCRATCH <= NSG * ROWS * SS && 8u * HD4 <= NSG * ROWS * SS;

fn qk_scratch_store(i: u32, v: f32) {
  wg.s_tile[i] = v;
}

fn qk_scratch(i: u32) -> f32 {
  return wg.s_tile[i];
}

// vec4 column c of a row of 16-byte words (8 f16 each)
fn column_of_words(w: vec4<u32>, c: u32) -> vec4<f32> {
  let h = 2u * (c % 2u);
  return vec4<f32>(unpack2x16float(w[h]), unpack2x16float(w[h + 1u]));
}

fn q_norm4(c: u32) -> vec4<f32> {
  return column_of_words(q_norm[c / 2u], c);
}

fn k_norm4(c: u32) -> vec4<f32> {
  return column_of_words(k_norm[c / 2u], c);
}

// The new key's K and V at vec4 `at` (of f16): columns through the scratch ([column][4], K then
// V), then each of the first HD4 / 2 invocations packs two columns into a word of each.
fn put_new_kv(at: u32, lid: u32, k: vec4<f32>, v: vec4<f32>) {
  if (lid < HD4) {
    for (var j = 0u; j < 4u; j++) {
      qk_scratch_store(4u * lid + j, k[j]);
      qk_scratch_store(4u * (HD4 + lid) + j, v[j]);
    }
  }
  workgroupBarrier();
  if (lid < HD4 / 2u) {
    let w = at / 2u + lid;
    k_cache[w] = words_at(8u * lid);
    v_cache[w] = words_at(4u * HD4 + 8u * lid);
  }
}

// 8 scratch values from `i` as a word of f16
fn words_at(i: u32) -> vec4<u32> {
  var r = vec4<u32>();
  for (var j = 0u; j < 4u; j++) {
    // (clamped to f16's range: pack2x16float leaves values past it undefined)
    let pair = vec2<f32>(qk_scratch(i + 2u * j), qk_scratch(i + 2u * j + 1u));
    r[j] = pack2x16float(clamp(pair, vec2<f32>(-T_MAX), vec2<f32>(T_MAX)));
  }
  return r;
}
