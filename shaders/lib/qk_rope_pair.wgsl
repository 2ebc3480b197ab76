// The rotation pair (i, i + half) of head h of token t, for both forms of qk_norm_rope_cache:
// the head's values x1 (at i) and x2 (at i + half) times inv and, where params.qk_norm is set,
// the head's norm weight (q_norm or k_norm), rotated by the RoPE table row at `table` (cos for
// i < half, then sin), and written to q_out (a q head; with params.q16, to q16 as T times
// params.q16_scale, clamped) or, for a k head of a token with a slot, to k_cache, clamped to T's
// range (an f16 cache keeps an outlier finite, as every f16 writer does). The including shader
// binds q_norm, k_norm, cos_sin, q_out, q16 and k_cache and has params.{num_q_heads,
// num_kv_heads, head_dim, qk_norm, q16, q16_scale}.
fn put_rotated_pair(
  t: u32,
  h: u32,
  i: u32,
  x1: f32,
  x2: f32,
  inv: f32,
  table: u32,
  slot: i32,
) {
  let nq = params.num_q_heads;
  let nkv = params.num_kv_heads;
  let hd = params.head_dim;
  let half = hd / 2u;
  let is_q = h < nq;
  var w1 = 1.0;
  var w2 = 1.0;
  if (params.qk_norm != 0u) {
    if (is_q) {
      w1 = f32(q_norm[i]);
      w2 = f32(q_norm[i + half]);
    } else {
      w1 = f32(k_norm[i]);
      w2 = f32(k_norm[i + half]);
    }
  }
  let x1n = x1 * inv * w1;
  let x2n = x2 * inv * w2;
  let c = cos_sin[table + i];
  let s = cos_sin[table + half + i];
  let y1 = x1n * c - x2n * s;
  let y2 = x2n * c + x1n * s;
  if (is_q) {
    let dst = (t * nq + h) * hd;
    if (params.q16 != 0u) {
      q16[dst + i] = T(clamp(y1 * params.q16_scale, -T_MAX, T_MAX));
      q16[dst + i + half] = T(clamp(y2 * params.q16_scale, -T_MAX, T_MAX));
    } else {
      q_out[dst + i] = y1;
      q_out[dst + i + half] = y2;
    }
  } else if (slot >= 0) {
    let dst = (u32(slot) * nkv + h - nq) * hd;
    k_cache[dst + i] = T(clamp(y1, -T_MAX, T_MAX));
    k_cache[dst + i + half] = T(clamp(y2, -T_MAX, T_MAX));
  }
}
