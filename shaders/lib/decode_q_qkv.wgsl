// How a decode attention form gets its query (the hooks of lib/decode_tiled_main.wgsl and
// lib/decode_tcdw2_main.wgsl) with qk_norm_rope_cache's work inside it
// (kernels/paged_attention_decode_qk.ts): q's heads are normed (q_norm) and rotated (RoPE at
// position context_len - 1) from the projection row `qkv` by every workgroup that needs them,
// and the workgroup whose split holds the new key (the last one of its sequence) norms and
// rotates its kv head's K, writes K and V into the cache at that position and makes them
// visible to its own loads before it issues any. The arithmetic is qk_norm_rope_cache.wgsl's
// (the sums of squares in another order). Needs head_dim a multiple of 8 (vec4 columns of the
// rotated halves) and at most 16 query heads a kv head. The including shader provides, for its
// form: QK_SCRATCH f32 values of workgroup memory (qk_scratch_store, qk_scratch), the norm
// weights' vec4 columns (q_norm4, k_norm4) and the store of the new key's K and V columns
// (put_new_kv).

// scratch: per (head of the group, part of 8) sums of squares, then per head its inverse norm
const QK_INV: u32 = 128u;
const QK_SCRATCH: u32 = QK_INV + 16u;

// vec4 j of the projection rows, its split-K partials added in splitk_reduce's order.
fn qkv4(j: u32) -> vec4<f32> {
  var v = qkv[j];
  for (var s = 1u; s < params.qkv_splits; s++) {
    v += qkv[s * params.qkv_split_stride + j];
  }
  return v;
}

// vec4 column c of a head whose row starts at vec4 `base`, normed (inv, weight w of column c
// and wp of its partner in the other half: 1 without qk norm) and rotated at `pos`.
fn rotated_column(base: u32, c: u32, hd4: u32, inv: f32, w: vec4<f32>, wp: vec4<f32>, pos: u32) -> vec4<f32> {
  let half4 = hd4 / 2u;
  let pc = (c + half4) % hd4;
  let one = vec4<f32>(1.0);
  let normed = params.qk_norm != 0u;
  let x = qkv4(base + c) * inv * select(one, w, normed);
  let xp = qkv4(base + pc) * inv * select(one, wp, normed);
  let i = c % half4;
  let cs = cos_sin[pos * hd4 + i];
  let sn = cos_sin[pos * hd4 + half4 + i];
  return select(x * cs + xp * sn, x * cs - xp * sn, c < half4);
}

fn inv_norm(ss: f32) -> f32 {
  return select(1.0, inverseSqrt(ss / f32(params.head_dim) + params.eps), params.qk_norm != 0u);
}

fn query_pos(d: DecodeSplit) -> u32 {
  return min(d.context_len - 1u, params.max_positions - 1u);
}

// The vec4 where the projection row of the step's query token d.query_row holds head h.
fn qkv_head(d: DecodeSplit, h: u32) -> u32 {
  return (d.query_row * (params.num_q_heads + 2u * params.num_kv_heads) + h) * d.hd4;
}

// The last split of a sequence (it holds key context_len - 1) writes that key's K and V.
fn decode_new_kv(d: DecodeSplit, lid: u32) {
  if (d.key_end != d.context_len) {
    return;
  }
  let kb = qkv_head(d, params.num_q_heads + d.kvh);
  let c = lid % d.hd4;
  let x = qkv4(kb + c);
  if (lid < d.hd4) {
    qk_scratch_store(lid, dot(x, x));
  }
  workgroupBarrier();
  var ss = 0.0;
  for (var i = 0u; i < d.hd4; i++) {
    ss += qk_scratch(i);
  }
  let pc = (c + d.hd4 / 2u) % d.hd4;
  let k = rotated_column(kb, c, d.hd4, inv_norm(ss), k_norm4(c), k_norm4(pc), query_pos(d));
  let v = qkv4(qkv_head(d, params.num_q_heads + params.num_kv_heads + d.kvh) + c);
  // (every reader of the scratch is past here before put_new_kv may reuse it)
  workgroupBarrier();
  put_new_kv(paged_kv_base(d.seq, d.context_len - 1u, d.kvh), lid, k, v);
  // this workgroup's loads of the key come after
  storageBarrier();
  workgroupBarrier();
}

// The inverse norms of the group's query heads into the scratch: invocation 8 g + p sums the
// squares of columns p, p + 8, ... of head g.
fn decode_q_prepare(d: DecodeSplit, lid: u32) {
  for (var i = lid; i < 8u * d.group; i += WG) {
    let base = qkv_head(d, d.head0 + i / 8u);
    var ss = 0.0;
    for (var c = i % 8u; c < d.hd4; c += 8u) {
      let x = qkv4(base + c);
      ss += dot(x, x);
    }
    qk_scratch_store(i, ss);
  }
  workgroupBarrier();
  for (var g = lid; g < d.group; g += WG) {
    var ss = 0.0;
    for (var p = 0u; p < 8u; p++) {
      ss += qk_scratch(8u * g + p);
    }
    qk_scratch_store(QK_INV + g, inv_norm(ss));
  }
  workgroupBarrier();
}

// vec4 column c of query head head0 + g, normed and rotated, unscaled.
fn decode_q(d: DecodeSplit, g: u32, c: u32) -> vec4<f32> {
  let pc = (c + d.hd4 / 2u) % d.hd4;
  return rotated_column(
    qkv_head(d, d.head0 + g),
    c,
    d.hd4,
    qk_scratch(QK_INV + g),
    q_norm4(c),
    q_norm4(pc),
    query_pos(d),
  );
}
