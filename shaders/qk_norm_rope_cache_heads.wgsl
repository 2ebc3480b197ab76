// q/k RMSNorm + RoPE + paged KV cache write, fused (see kernels/qk_norm_rope_cache.ts), several
// (token, head) pairs a workgroup: the form for many tokens. The same work as
// qk_norm_rope_cache.wgsl (one workgroup a pair) over the fused projection row
// qkv[t] = [q heads | k heads | v heads]:
//   q head: optional per-head RMSNorm (weight q_norm), RoPE, written to q_out[t, head];
//   k head: optional RMSNorm (k_norm), RoPE, written to k_cache at slot_mapping[t];
//   v head: copied to v_cache at slot_mapping[t].
// A token with slot < 0 (padding) writes no K/V. RoPE is the rotate-half form with the host
// table cos_sin[pos] = [cos(pos f_i) for i < half, sin(pos f_i) for i < half]. With splits > 1,
// qkv holds the projection's split-K partial sums [splits, tokens, width] (split_stride =
// tokens * width apart), each value their sum in splitk_reduce's order.
//
// Layout: a head takes `lanes` consecutive invocations (head_lanes: the least power of two
// with lanes * PAIRS >= head_dim / 2, at most WG; the grid refuses larger heads), a workgroup
// WG / lanes consecutive (token, head) pairs. Lane j of a head holds the rotation pairs
// (i, i + half) for i = j + k * lanes, k < PAIRS, in registers: each load of a head's lanes
// reads consecutive f32s, qkv is read once, and head_dim 128 with PAIRS 2 is 32 lanes of 4
// values. The sum of squares of a head is a segmented tree in workgroup memory, RADIX values
// a step (no subgroup operations: any subgroup size, lavapipe's 8 too): lanes 32 and RADIX 8
// are 32 -> 4 partial sums, then every lane adds the 4, 2 barriers. Invocations past the last
// pair take part in the barriers and write nothing (control flow stays uniform around them).

//#include "lib/qkv_partials.wgsl"
//#include "lib/qk_rope_pair.wgsl"

var<workgroup> head_ss: array<f32, WG>;

// Invocations a head (as kernels/qk_norm_rope_cache.ts headLanes): the least power of two
// whose lanes hold head_dim / 2 rotation pairs at PAIRS a lane, at most WG.
fn head_lanes(half: u32) -> u32 {
  let need = max((half + PAIRS - 1u) / PAIRS, 1u);
  return min(1u << (32u - countLeadingZeros(need - 1u)), WG);
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let nq = params.num_q_heads;
  let nkv = params.num_kv_heads;
  let heads = nq + 2u * nkv;
  let hd = params.head_dim;
  let half = hd / 2u;
  let lanes = head_lanes(half);
  let lane = lid % lanes;
  let base = lid - lane;
  let idx = (wid.x + wid.y * nwg.x) * (WG / lanes) + lid / lanes;
  let live = idx < params.tokens * heads;
  let t = idx / heads;
  let h = idx % heads;
  let is_q = h < nq;
  let is_v = h >= nq + nkv;
  var slot = -1;
  if (live) {
    slot = slot_mapping[t];
  }
  // q heads always write; k and v heads only for a token with a slot
  let writes = live && (is_q || slot >= 0);

  let src = idx * hd;
  var x1: array<f32, PAIRS>;
  var x2: array<f32, PAIRS>;
  var ss = 0.0;
  for (var k = 0u; k < PAIRS; k++) {
    let i = lane + k * lanes;
    if (writes && i < half) {
      let a = qkv_at(src + i);
      let b = qkv_at(src + i + half);
      x1[k] = a;
      x2[k] = b;
      ss += a * a + b * b;
    }
  }

  var inv = 1.0;
  if (params.qk_norm != 0u) {
    // every invocation of the workgroup: uniform (params), v heads and dead ones included
    head_ss[lid] = ss;
    workgroupBarrier();
    var w = lanes;
    while (w > RADIX) {
      let stride = w / RADIX;
      if (lane < stride) {
        // lane reads its own slot and ones >= stride, which no other lane writes this step
        var s = 0.0;
        for (var r = 0u; r < RADIX; r++) {
          s += head_ss[base + lane + r * stride];
        }
        head_ss[base + lane] = s;
      }
      workgroupBarrier();
      w = stride;
    }
    var total = 0.0;
    for (var j = 0u; j < w; j++) {
      total += head_ss[base + j];
    }
    inv = inverseSqrt(total / f32(hd) + params.eps);
  }
  if (!writes) {
    return;
  }

  if (is_v) {
    let dst = (u32(slot) * nkv + h - nq - nkv) * hd;
    for (var k = 0u; k < PAIRS; k++) {
      let i = lane + k * lanes;
      if (i < half) {
        v_cache[dst + i] = T(clamp(x1[k], -T_MAX, T_MAX));
        v_cache[dst + i + half] = T(clamp(x2[k], -T_MAX, T_MAX));
      }
    }
    return;
  }

  let pos = min(u32(max(positions[t], 0)), params.max_positions - 1u);
  let table = pos * hd;
  for (var k = 0u; k < PAIRS; k++) {
    let i = lane + k * lanes;
    if (i < half) {
      put_rotated_pair(t, h, i, x1[k], x2[k], inv, table, slot);
    }
  }
}
