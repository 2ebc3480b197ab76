// Paged causal attention on f16 subgroup matrices (tensor cores): prefill and any mix of
// sequences (see kernels/paged_attention_tc.ts). Workgroup (q tile, seq, kv head), one
// subgroup of 32 (every matrix offset is then workgroup-uniform), owns ROWS = 16 query rows:
// row r = (token t0 + r / G, head kvh * G + r % G) with G = num_q_heads / num_kv_heads, so
// every K/V matrix loaded serves the whole GQA group. Q (scaled, f16) is loaded into ND
// left matrices once, through wg.q16.
// Per step of KW = 16 KT keys (KT key tiles of 16; a tile lies inside one KV block):
//   S = Q K^T with K^T loaded straight from the paged cache (col_major, stride
//     num_kv_heads * HD); S to wg.s_tile. V of the step is loaded meanwhile, straight from the
//     cache, or, when the step reaches past the context, from wg.q16 (free once Q is in
//     registers) with zeros there: a stale slot must not meet a zero probability as Inf
//     or NaN.
//   barrier; invocations 2r and 2r + 1 share row r (half the step's keys each, the max
//     meeting through a shuffle). A row takes a new max only when the step's scores pass
//     the running one by more than TAU (and then rescales O and l by alpha); otherwise
//     P = exp(S - max) <= e^TAU stays well inside f16. P to wg.p_tile as f16; l sums the
//     rounded P, so the weights sum exactly to l.
//   if any row rescaled (rare once the first keys have set the max): O through wg.s_tile,
//     16 columns at a time, each row times its alpha.
//   O += P V.
// At the end O goes through wg.s_tile 16 columns at a time, each row divided by l, and the
// query rows are written.
//#include "lib/paged_kv.wgsl"

// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Slack of the running max: P = exp(S - max) <= e^8 (about 2981; f16 holds 65504).
const TAU: f32 = 8.0;
// Largest finite f16 (q is clamped into it before conversion).
const Q_LIMIT: f32 = 65504.0;
const ROWS: u32 = 16u;
const KW: u32 = 16u * KT;
// keys of a step each invocation of a row pair scores
const KH: u32 = KW / 2u;
const ND: u32 = HD / 16u;
// f16 rows padded by 16 bytes (a matrix load's rows start on distinct banks)
const QS: u32 = HD + 8u;
const PS: u32 = KW + 8u;
const SS: u32 = KW;
// rows of q16: the tile's query rows, then a step's staged keys
const QR: u32 = max(ROWS, KW);
const_assert KT >= 1u && KT <= 2u;
const_assert ND >= 1u && ND <= 8u && ND * 16u == HD;

// The workgroup memory is one struct: with the arrays as separate workgroup variables the
// H200's driver (580.159.04) gave the matrix stores and loads and the invocations' own
// reads and writes different views of them, and every result came out wrong (see
// kernels/paged_attention_tc.ts).
struct Wg {
  // [row][d]: q * scale; later [key][d]: a step's V staged with zeros past the context
  q16: array<f16, QR * QS>,
  // [row][key]: S; [row][16 dims]: O slices
  s_tile: array<f32, ROWS * SS>,
  // [row][key]: probabilities
  p_tile: array<f16, ROWS * PS>,
  // "some row rescales": step t sets flags[t % 2] and clears the other one for step t + 1
  flags: array<atomic<u32>, 2>,
}
var<workgroup> wg: Wg;

// Offsets into the workgroup arrays, computed by functions: Tint checks constant matrix
// offsets against the array even in the branches a variant never takes.
fn q_at(d: u32) -> u32 {
  return (d % ND) * 16u;
}

fn key_tile_at(kt: u32) -> u32 {
  return (kt % KT) * 16u;
}

fn v_at(kt: u32, d: u32) -> u32 {
  return (kt % KT) * 16u * QS + (d % ND) * 16u;
}

// Element index of key `key` of sequence `seq`, kv head `kvh`, in the paged cache.
fn kv_at(seq: u32, key: u32, kvh: u32) -> u32 {
  return 4u * paged_kv_base(seq, key, kvh);
}

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let seq = wid.y;
  let kvh = wid.z;
  let group = params.num_q_heads / params.num_kv_heads;
  let tq = ROWS / group;
  let query_start = u32(seq_info[seq * 3u]);
  let query_len = u32(seq_info[seq * 3u + 1u]);
  let context_len = u32(seq_info[seq * 3u + 2u]);
  // Last tiles first: causal tiles grow with their index.
  let tile = (params.max_query_len + tq - 1u) / tq - 1u - wid.x;
  let t0 = tile * tq;
  if (t0 >= query_len) {
    return;
  }
  let tile_tokens = min(tq, query_len - t0);
  let n_rows = tile_tokens * group;
  let first_pos = context_len - query_len + t0;
  let kv_end = first_pos + tile_tokens;
  let first_token = query_start + t0;
  let hd4 = HD / 4u;
  let kv_stride = params.num_kv_heads * HD;

  // wg.q16 = q * scale of the tile's rows as f16, zeros past n_rows.
  for (var e = lid; e < ROWS * hd4; e += 32u) {
    let r = e / hd4;
    let c = e % hd4;
    var v = vec4<f32>(0.0);
    if (r < n_rows) {
      let token = first_token + r / group;
      let head = kvh * group + r % group;
      v = q[(token * params.num_q_heads + head) * hd4 + c] * params.scale;
    }
    let h = vec4<f16>(clamp(v, vec4<f32>(-Q_LIMIT), vec4<f32>(Q_LIMIT)));
    let at = r * QS + 4u * c;
    wg.q16[at] = h.x;
    wg.q16[at + 1u] = h.y;
    wg.q16[at + 2u] = h.z;
    wg.q16[at + 3u] = h.w;
  }
  if (lid == 0u) {
    atomicStore(&wg.flags[0], 0u);
    atomicStore(&wg.flags[1], 0u);
  }
  workgroupBarrier();
  var q0 = subgroup_matrix_left<f16, 16, 16>();
  var q1 = subgroup_matrix_left<f16, 16, 16>();
  var q2 = subgroup_matrix_left<f16, 16, 16>();
  var q3 = subgroup_matrix_left<f16, 16, 16>();
  var q4 = subgroup_matrix_left<f16, 16, 16>();
  var q5 = subgroup_matrix_left<f16, 16, 16>();
  var q6 = subgroup_matrix_left<f16, 16, 16>();
  var q7 = subgroup_matrix_left<f16, 16, 16>();
  q0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q16, q_at(0u), QS);
  if (ND > 1u) {
    q1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q16, q_at(1u), QS);
  }
  if (ND > 2u) {
    q2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q16, q_at(2u), QS);
  }
  if (ND > 3u) {
    q3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q16, q_at(3u), QS);
  }
  if (ND > 4u) {
    q4 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q16, q_at(4u), QS);
  }
  if (ND > 5u) {
    q5 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q16, q_at(5u), QS);
  }
  if (ND > 6u) {
    q6 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q16, q_at(6u), QS);
  }
  if (ND > 7u) {
    q7 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q16, q_at(7u), QS);
  }
  // wg.q16 takes staged V later: every load above comes first
  workgroupBarrier();

  // Invocations 2 row and 2 row + 1: row `row`, keys half * KH .. of each step.
  let row = lid / 2u;
  let half = lid % 2u;
  // the last key the row may see (a padding row sees the tile's keys, with q = 0)
  var lim = kv_end - 1u;
  if (row < n_rows) {
    lim = first_pos + row / group;
  }
  var m_run = NEG;
  // this invocation's share of the row's sum
  var l_run = 0.0;
  // o<d>: dims 16 d .. 16 d + 15 (d < ND)
  var o0 = subgroup_matrix_result<f32, 16, 16>();
  var o1 = subgroup_matrix_result<f32, 16, 16>();
  var o2 = subgroup_matrix_result<f32, 16, 16>();
  var o3 = subgroup_matrix_result<f32, 16, 16>();
  var o4 = subgroup_matrix_result<f32, 16, 16>();
  var o5 = subgroup_matrix_result<f32, 16, 16>();
  var o6 = subgroup_matrix_result<f32, 16, 16>();
  var o7 = subgroup_matrix_result<f32, 16, 16>();
  let n_steps = (kv_end + KW - 1u) / KW;

  for (var t = 0u; t < n_steps; t++) {
    let kb = t * KW;
    // Cache offsets of the step's key tiles; a tile past kv_end (masked) reads tile 0's.
    let base0 = kv_at(seq, kb, kvh);
    var base1 = base0;
    if (KT > 1u && kb + 16u < kv_end) {
      base1 = kv_at(seq, kb + 16u, kvh);
    }
    let staged = kb + KW > context_len;

    // S = Q K^T (scale folded into q)
    var s0 = subgroup_matrix_result<f32, 16, 16>();
    var s1 = subgroup_matrix_result<f32, 16, 16>();
    s0 = subgroupMatrixMultiplyAccumulate(q0, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base0 + 0u, kv_stride), s0);
    if (KT > 1u) {
      s1 = subgroupMatrixMultiplyAccumulate(q0, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base1 + 0u, kv_stride), s1);
    }
    if (ND > 1u) {
      s0 = subgroupMatrixMultiplyAccumulate(q1, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base0 + 16u, kv_stride), s0);
      if (KT > 1u) {
        s1 = subgroupMatrixMultiplyAccumulate(q1, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base1 + 16u, kv_stride), s1);
      }
    }
    if (ND > 2u) {
      s0 = subgroupMatrixMultiplyAccumulate(q2, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base0 + 32u, kv_stride), s0);
      if (KT > 1u) {
        s1 = subgroupMatrixMultiplyAccumulate(q2, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base1 + 32u, kv_stride), s1);
      }
    }
    if (ND > 3u) {
      s0 = subgroupMatrixMultiplyAccumulate(q3, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base0 + 48u, kv_stride), s0);
      if (KT > 1u) {
        s1 = subgroupMatrixMultiplyAccumulate(q3, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base1 + 48u, kv_stride), s1);
      }
    }
    if (ND > 4u) {
      s0 = subgroupMatrixMultiplyAccumulate(q4, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base0 + 64u, kv_stride), s0);
      if (KT > 1u) {
        s1 = subgroupMatrixMultiplyAccumulate(q4, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base1 + 64u, kv_stride), s1);
      }
    }
    if (ND > 5u) {
      s0 = subgroupMatrixMultiplyAccumulate(q5, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base0 + 80u, kv_stride), s0);
      if (KT > 1u) {
        s1 = subgroupMatrixMultiplyAccumulate(q5, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base1 + 80u, kv_stride), s1);
      }
    }
    if (ND > 6u) {
      s0 = subgroupMatrixMultiplyAccumulate(q6, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base0 + 96u, kv_stride), s0);
      if (KT > 1u) {
        s1 = subgroupMatrixMultiplyAccumulate(q6, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base1 + 96u, kv_stride), s1);
      }
    }
    if (ND > 7u) {
      s0 = subgroupMatrixMultiplyAccumulate(q7, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base0 + 112u, kv_stride), s0);
      if (KT > 1u) {
        s1 = subgroupMatrixMultiplyAccumulate(q7, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base1 + 112u, kv_stride), s1);
      }
    }
    subgroupMatrixStore<row_major>(&wg.s_tile, key_tile_at(0u), s0, SS);
    if (KT > 1u) {
      subgroupMatrixStore<row_major>(&wg.s_tile, key_tile_at(1u), s1, SS);
    }
    // V of the step: from the cache now (its latency hides behind the softmax), or staged
    var v0a = subgroup_matrix_right<f16, 16, 16>();
    var v0b = subgroup_matrix_right<f16, 16, 16>();
    var v1a = subgroup_matrix_right<f16, 16, 16>();
    var v1b = subgroup_matrix_right<f16, 16, 16>();
    var v2a = subgroup_matrix_right<f16, 16, 16>();
    var v2b = subgroup_matrix_right<f16, 16, 16>();
    var v3a = subgroup_matrix_right<f16, 16, 16>();
    var v3b = subgroup_matrix_right<f16, 16, 16>();
    var v4a = subgroup_matrix_right<f16, 16, 16>();
    var v4b = subgroup_matrix_right<f16, 16, 16>();
    var v5a = subgroup_matrix_right<f16, 16, 16>();
    var v5b = subgroup_matrix_right<f16, 16, 16>();
    var v6a = subgroup_matrix_right<f16, 16, 16>();
    var v6b = subgroup_matrix_right<f16, 16, 16>();
    var v7a = subgroup_matrix_right<f16, 16, 16>();
    var v7b = subgroup_matrix_right<f16, 16, 16>();
    if (staged) {
      for (var e = lid; e < KW * HD; e += 32u) {
        let j = e / HD;
        let c = e % HD;
        var v = f16(0.0);
        if (kb + j < context_len) {
          v = v_cache[kv_at(seq, kb + j, kvh) + c];
        }
        wg.q16[j * QS + c] = v;
      }
    } else {
      v0a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base0 + 0u, kv_stride);
      if (KT > 1u) {
        v0b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base1 + 0u, kv_stride);
      }
      if (ND > 1u) {
        v1a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base0 + 16u, kv_stride);
        if (KT > 1u) {
          v1b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base1 + 16u, kv_stride);
        }
      }
      if (ND > 2u) {
        v2a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base0 + 32u, kv_stride);
        if (KT > 1u) {
          v2b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base1 + 32u, kv_stride);
        }
      }
      if (ND > 3u) {
        v3a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base0 + 48u, kv_stride);
        if (KT > 1u) {
          v3b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base1 + 48u, kv_stride);
        }
      }
      if (ND > 4u) {
        v4a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base0 + 64u, kv_stride);
        if (KT > 1u) {
          v4b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base1 + 64u, kv_stride);
        }
      }
      if (ND > 5u) {
        v5a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base0 + 80u, kv_stride);
        if (KT > 1u) {
          v5b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base1 + 80u, kv_stride);
        }
      }
      if (ND > 6u) {
        v6a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base0 + 96u, kv_stride);
        if (KT > 1u) {
          v6b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base1 + 96u, kv_stride);
        }
      }
      if (ND > 7u) {
        v7a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base0 + 112u, kv_stride);
        if (KT > 1u) {
          v7b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base1 + 112u, kv_stride);
        }
      }
    }
    workgroupBarrier();
    if (staged) {
      v0a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(0u, 0u), QS);
      if (KT > 1u) {
        v0b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(1u, 0u), QS);
      }
      if (ND > 1u) {
        v1a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(0u, 1u), QS);
        if (KT > 1u) {
          v1b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(1u, 1u), QS);
        }
      }
      if (ND > 2u) {
        v2a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(0u, 2u), QS);
        if (KT > 1u) {
          v2b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(1u, 2u), QS);
        }
      }
      if (ND > 3u) {
        v3a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(0u, 3u), QS);
        if (KT > 1u) {
          v3b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(1u, 3u), QS);
        }
      }
      if (ND > 4u) {
        v4a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(0u, 4u), QS);
        if (KT > 1u) {
          v4b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(1u, 4u), QS);
        }
      }
      if (ND > 5u) {
        v5a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(0u, 5u), QS);
        if (KT > 1u) {
          v5b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(1u, 5u), QS);
        }
      }
      if (ND > 6u) {
        v6a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(0u, 6u), QS);
        if (KT > 1u) {
          v6b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(1u, 6u), QS);
        }
      }
      if (ND > 7u) {
        v7a = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(0u, 7u), QS);
        if (KT > 1u) {
          v7b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.q16, v_at(1u, 7u), QS);
        }
      }
    }

    // Row `row`'s softmax step over this invocation's half of the keys.
    var mt = NEG;
    for (var j = 0u; j < KH; j++) {
      let key = half * KH + j;
      if (kb + key <= lim) {
        mt = max(mt, wg.s_tile[row * SS + key]);
      }
    }
    mt = max(mt, subgroupShuffleXor(mt, 1u));
    var alpha = 1.0;
    // The first step always takes its max (every row sees key 0; O and l are still 0).
    if (mt > m_run + TAU) {
      alpha = exp(m_run - mt);
      m_run = mt;
      if (t > 0u) {
        atomicOr(&wg.flags[t % 2u], 1u);
      }
    }
    l_run *= alpha;
    for (var j = 0u; j < KH; j++) {
      let key = half * KH + j;
      var p = 0.0;
      if (kb + key <= lim) {
        p = exp(wg.s_tile[row * SS + key] - m_run);
      }
      let ph = f16(p);
      wg.p_tile[row * PS + key] = ph;
      l_run += f32(ph);
    }
    if (lid == 0u) {
      atomicStore(&wg.flags[(t + 1u) % 2u], 0u);
    }
    let rescale = workgroupUniformLoad(&wg.flags[t % 2u]);
    if (rescale != 0u) {
      subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o0, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o0 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
      workgroupBarrier();
      if (ND > 1u) {
        subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o1, SS);
        workgroupBarrier();
        scale_slice(row, half, alpha);
        workgroupBarrier();
        o1 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
        workgroupBarrier();
      }
      if (ND > 2u) {
        subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o2, SS);
        workgroupBarrier();
        scale_slice(row, half, alpha);
        workgroupBarrier();
        o2 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
        workgroupBarrier();
      }
      if (ND > 3u) {
        subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o3, SS);
        workgroupBarrier();
        scale_slice(row, half, alpha);
        workgroupBarrier();
        o3 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
        workgroupBarrier();
      }
      if (ND > 4u) {
        subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o4, SS);
        workgroupBarrier();
        scale_slice(row, half, alpha);
        workgroupBarrier();
        o4 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
        workgroupBarrier();
      }
      if (ND > 5u) {
        subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o5, SS);
        workgroupBarrier();
        scale_slice(row, half, alpha);
        workgroupBarrier();
        o5 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
        workgroupBarrier();
      }
      if (ND > 6u) {
        subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o6, SS);
        workgroupBarrier();
        scale_slice(row, half, alpha);
        workgroupBarrier();
        o6 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
        workgroupBarrier();
      }
      if (ND > 7u) {
        subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o7, SS);
        workgroupBarrier();
        scale_slice(row, half, alpha);
        workgroupBarrier();
        o7 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
        workgroupBarrier();
      }
    }

    // O += P V
    let pa = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.p_tile, key_tile_at(0u), PS);
    var pb = pa;
    if (KT > 1u) {
      pb = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.p_tile, key_tile_at(1u), PS);
    }
    o0 = subgroupMatrixMultiplyAccumulate(pa, v0a, o0);
    if (KT > 1u) {
      o0 = subgroupMatrixMultiplyAccumulate(pb, v0b, o0);
    }
    if (ND > 1u) {
      o1 = subgroupMatrixMultiplyAccumulate(pa, v1a, o1);
      if (KT > 1u) {
        o1 = subgroupMatrixMultiplyAccumulate(pb, v1b, o1);
      }
    }
    if (ND > 2u) {
      o2 = subgroupMatrixMultiplyAccumulate(pa, v2a, o2);
      if (KT > 1u) {
        o2 = subgroupMatrixMultiplyAccumulate(pb, v2b, o2);
      }
    }
    if (ND > 3u) {
      o3 = subgroupMatrixMultiplyAccumulate(pa, v3a, o3);
      if (KT > 1u) {
        o3 = subgroupMatrixMultiplyAccumulate(pb, v3b, o3);
      }
    }
    if (ND > 4u) {
      o4 = subgroupMatrixMultiplyAccumulate(pa, v4a, o4);
      if (KT > 1u) {
        o4 = subgroupMatrixMultiplyAccumulate(pb, v4b, o4);
      }
    }
    if (ND > 5u) {
      o5 = subgroupMatrixMultiplyAccumulate(pa, v5a, o5);
      if (KT > 1u) {
        o5 = subgroupMatrixMultiplyAccumulate(pb, v5b, o5);
      }
    }
    if (ND > 6u) {
      o6 = subgroupMatrixMultiplyAccumulate(pa, v6a, o6);
      if (KT > 1u) {
        o6 = subgroupMatrixMultiplyAccumulate(pb, v6b, o6);
      }
    }
    if (ND > 7u) {
      o7 = subgroupMatrixMultiplyAccumulate(pa, v7a, o7);
      if (KT > 1u) {
        o7 = subgroupMatrixMultiplyAccumulate(pb, v7b, o7);
      }
    }
    // wg.s_tile and wg.p_tile are written again in the next step only after every read above
    workgroupBarrier();
  }

  // out = O / l for the query rows, 16 dims at a time through wg.s_tile
  let l = l_run + subgroupShuffleXor(l_run, 1u);
  let inv = select(0.0, 1.0 / l, l > 0.0);
  let token = first_token + row / group;
  let head = kvh * group + row % group;
  let out_at = (token * params.num_q_heads + head) * hd4 + 2u * half;
  subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o0, SS);
  workgroupBarrier();
  write_slice(row, half, n_rows, out_at, 0u, inv);
  workgroupBarrier();
  if (ND > 1u) {
    subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o1, SS);
    workgroupBarrier();
    write_slice(row, half, n_rows, out_at, 1u, inv);
    workgroupBarrier();
  }
  if (ND > 2u) {
    subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o2, SS);
    workgroupBarrier();
    write_slice(row, half, n_rows, out_at, 2u, inv);
    workgroupBarrier();
  }
  if (ND > 3u) {
    subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o3, SS);
    workgroupBarrier();
    write_slice(row, half, n_rows, out_at, 3u, inv);
    workgroupBarrier();
  }
  if (ND > 4u) {
    subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o4, SS);
    workgroupBarrier();
    write_slice(row, half, n_rows, out_at, 4u, inv);
    workgroupBarrier();
  }
  if (ND > 5u) {
    subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o5, SS);
    workgroupBarrier();
    write_slice(row, half, n_rows, out_at, 5u, inv);
    workgroupBarrier();
  }
  if (ND > 6u) {
    subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o6, SS);
    workgroupBarrier();
    write_slice(row, half, n_rows, out_at, 6u, inv);
    workgroupBarrier();
  }
  if (ND > 7u) {
    subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o7, SS);
    workgroupBarrier();
    write_slice(row, half, n_rows, out_at, 7u, inv);
    workgroupBarrier();
  }
}

// Writes this invocation's 8 of a row's 16 dims of O slice d (in wg.s_tile), times inv.
fn write_slice(row: u32, half: u32, n_rows: u32, out_at: u32, d: u32, inv: f32) {
  if (row < n_rows) {
    let at = row * SS + 8u * half;
    let a = vec4<f32>(wg.s_tile[at], wg.s_tile[at + 1u], wg.s_tile[at + 2u], wg.s_tile[at + 3u]);
    let b = vec4<f32>(wg.s_tile[at + 4u], wg.s_tile[at + 5u], wg.s_tile[at + 6u], wg.s_tile[at + 7u]);
    out[out_at + 4u * d] = a * inv;
    out[out_at + 4u * d + 1u] = b * inv;
  }
}

// Scales this invocation's 8 of a row's 16 dims of the O slice in wg.s_tile by alpha.
fn scale_slice(row: u32, half: u32, alpha: f32) {
  let at = row * SS + 8u * half;
  for (var c = 0u; c < 8u; c++) {
    wg.s_tile[at + c] *= alpha;
  }
}
