// q/k RMSNorm + RoPE + paged KV cache write, fused (see kernels/qk_norm_rope_cache.ts).
// Workgroup (token, head) over the fused projection row qkv[t] = [q heads | k heads | v heads]:
//   q head: optional per-head RMSNorm (weight q_norm), RoPE, written to q_out[t, head];
//   k head: optional RMSNorm (k_norm), RoPE, written to k_cache at slot_mapping[t];
//   v head: copied to v_cache at slot_mapping[t].
// A token with slot < 0 (padding) writes no K/V. RoPE is the rotate-half form with the
// host table cos_sin[pos] = [cos(pos f_i) for i < half, sin(pos f_i) for i < half].
// With splits > 1, qkv holds the projection's split-K partial sums [splits, tokens, width]
// (split_stride = tokens * width apart) and each value is their sum, in the order
// splitk_reduce adds them, so the reduce dispatch before this one is left out.
//#include "lib/workgroup_sum.wgsl"
//#include "lib/qkv_partials.wgsl"
//#include "lib/qk_rope_pair.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let nq = params.num_q_heads;
  let nkv = params.num_kv_heads;
  let heads = nq + 2u * nkv;
  let idx = wid.x + wid.y * nwg.x;
  if (idx >= params.tokens * heads) {
    return;
  }
  let t = idx / heads;
  let h = idx % heads;
  let hd = params.head_dim;
  let half = hd / 2u;
  let src = idx * hd;
  let slot = slot_mapping[t];

  if (h >= nq + nkv) {
    if (slot >= 0) {
      let dst = (u32(slot) * nkv + h - nq - nkv) * hd;
      for (var i = lid; i < hd; i += WG) {
        v_cache[dst + i] = T(clamp(qkv_at(src + i), -T_MAX, T_MAX));
      }
    }
    return;
  }

  var ss = 0.0;
  for (var i = lid; i < hd; i += WG) {
    let x = qkv_at(src + i);
    ss += x * x;
  }
  let total = workgroup_sum(ss, lid);
  var inv = 1.0;
  if (params.qk_norm != 0u) {
    inv = inverseSqrt(total / f32(hd) + params.eps);
  }
  let pos = min(u32(max(positions[t], 0)), params.max_positions - 1u);
  let table = pos * hd;
  for (var i = lid; i < half; i += WG) {
    put_rotated_pair(t, h, i, qkv_at(src + i), qkv_at(src + i + half), inv, table, slot);
  }
}
