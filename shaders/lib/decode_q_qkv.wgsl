// How a decode attention form gets its query (the hooks of lib/decode_tiled_main.wgsl) with
// qk_norm_rope_cache's work inside it (kernels/paged_attention_decode_qk.ts): q's heads are
// normed (q_norm) and rotated (RoPE at position context_len - 1) from the projection row
// `qkv` by every workgroup that needs them, and the workgroup whose split holds the new key
// (the last one of its sequence) norms and rotates its kv head's K, writes K and V into the
// cache at that position and makes them visible to its own loads before it issues any. The
// arithmetic is qk_norm_rope_cache.wgsl's (the sum of squares in another order). Needs
// head_dim a multiple of 8 (vec4 columns of the rotated halves), at most 16 query heads a kv
// head and WG >= 128.

// Per (head of the group, part of 8): sums of squares; then per head its inverse norm.
var<workgroup> wg_q_ss: array<f32, 128>;
var<workgroup> wg_q_inv: array<f32, 16>;

// vec4 j of the projection row block, its split-K partials added in splitk_reduce's order.
fn qkv4(j: u32) -> vec4<f32> {
  var v = qkv[j];
  for (var s = 1u; s < params.qkv_splits; s++) {
    v += qkv[s * params.qkv_split_stride + j];
  }
  return v;
}

// Column c of a rotated head from its normed values: x (column c) and its partner column in
// the other half, both already times the norm and its weight.
fn rotate4(x: vec4<f32>, partner: vec4<f32>, c: u32, hd4: u32, pos: u32) -> vec4<f32> {
  let half4 = hd4 / 2u;
  let i = c % half4;
  let table = pos * hd4;
  let cs = cos_sin[table + i];
  let sn = cos_sin[table + half4 + i];
  return select(x * cs + partner * sn, x * cs - partner * sn, c < half4);
}

// The norm weight's column c (1 without qk norm).
fn norm_w(w: vec4<f32>) -> vec4<f32> {
  return select(vec4<f32>(1.0), w, params.qk_norm != 0u);
}

fn query_pos(d: DecodeSplit) -> u32 {
  return min(d.context_len - 1u, params.max_positions - 1u);
}

// The last split of a sequence (it holds key context_len - 1) writes that key's K and V.
fn decode_new_kv(d: DecodeSplit, lid: u32) {
  if (d.key_end != d.context_len) {
    return;
  }
  let nq = params.num_q_heads;
  let nkv = params.num_kv_heads;
  let row = d.query_row * (nq + 2u * nkv);
  let kb = (row + nq + d.kvh) * d.hd4;
  var x = vec4<f32>(0.0);
  if (lid < d.hd4) {
    x = qkv4(kb + lid);
  }
  if (lid < 32u) {
    wg_q_ss[lid] = dot(x, x);
  }
  workgroupBarrier();
  var ss = 0.0;
  for (var i = 0u; i < d.hd4; i++) {
    ss += wg_q_ss[i];
  }
  var inv = 1.0;
  if (params.qk_norm != 0u) {
    inv = inverseSqrt(ss / f32(params.head_dim) + params.eps);
  }
  let pos = query_pos(d);
  let at = paged_kv_base(d.seq, d.context_len - 1u, d.kvh);
  if (lid < d.hd4) {
    let pc = (lid + d.hd4 / 2u) % d.hd4;
    let y = x * inv * norm_w(t4(k_norm[lid]));
    let yp = qkv4(kb + pc) * inv * norm_w(t4(k_norm[pc]));
    k_cache[at + lid] = vec4<T>(rotate4(y, yp, lid, d.hd4, pos));
  } else if (lid < 2u * d.hd4) {
    let c = lid - d.hd4;
    v_cache[at + c] = vec4<T>(qkv4((row + nq + nkv + d.kvh) * d.hd4 + c));
  }
  // this workgroup's loads of the key come after (wg_q_ss is free again for the query's)
  storageBarrier();
  workgroupBarrier();
}

// The inverse norms of the group's query heads, into wg_q_inv: invocation 8 g + p sums the
// squares of columns p, p + 8, ... of head g.
fn decode_q_prepare(d: DecodeSplit, lid: u32) {
  let row = d.query_row * (params.num_q_heads + 2u * params.num_kv_heads);
  if (lid < 8u * d.group) {
    let g = lid / 8u;
    let base = (row + d.head0 + g) * d.hd4;
    var ss = 0.0;
    for (var c = lid % 8u; c < d.hd4; c += 8u) {
      let x = qkv4(base + c);
      ss += dot(x, x);
    }
    wg_q_ss[lid] = ss;
  }
  workgroupBarrier();
  if (lid < d.group) {
    var ss = 0.0;
    for (var p = 0u; p < 8u; p++) {
      ss += wg_q_ss[8u * lid + p];
    }
    var inv = 1.0;
    if (params.qk_norm != 0u) {
      inv = inverseSqrt(ss / f32(params.head_dim) + params.eps);
    }
    wg_q_inv[lid] = inv;
  }
  workgroupBarrier();
}

// vec4 column c of query head head0 + g, normed and rotated, unscaled.
fn decode_q(d: DecodeSplit, g: u32, c: u32) -> vec4<f32> {
  let base = (d.query_row * (params.num_q_heads + 2u * params.num_kv_heads) + d.head0 + g) *
    d.hd4;
  let inv = wg_q_inv[g];
  let pc = (c + d.hd4 / 2u) % d.hd4;
  let x = qkv4(base + c) * inv * norm_w(t4(q_norm[c]));
  let xp = qkv4(base + pc) * inv * norm_w(t4(q_norm[pc]));
  return rotate4(x, xp, c, d.hd4, query_pos(d));
}
