// Split-K paged decode attention on f16 subgroup matrices with K and V read straight from the
// paged cache: the f16-tcd variant of paged_attention_decode (same params, buffers, grid and
// outputs as the other forms; K/V bound as f16 scalars, see Variant.scalarReads and
// kernels/paged_attention_decode.ts). Workgroup (kv head, split, seq) = ONE subgroup of 32
// (every matrix offset is then workgroup-uniform). The 16 rows of the left matrices are the
// G = num_q_heads / num_kv_heads query heads of the kv head (rows >= G: zero queries, never
// written), so each K/V matrix serves the whole GQA group.
// Needs block_size a multiple of 16 and split_tokens a multiple of 16 (or one split): a step's
// 16 keys then lie in one KV block, 16 rows kv_stride = num_kv_heads * HD apart, and the
// matrix loads read them from the cache with no staging, no stores and no barrier of their
// own. Per step of 16 keys:
//   S = Q K^T (K^T col_major straight from the cache); V's 8 matrices are loaded (straight
//     from the cache, or, for the context's last partial tile, staged in wg.vt with zeros
//     past the context: a stale slot must not meet a zero probability as Inf or NaN). S to
//     wg.s; barrier;
//   invocations 2r and 2r + 1 run row r's online softmax over 8 keys each (the max meeting
//     through a shuffle), with the lazy max of the prefill kernel: a row takes a new max only
//     when the step's scores pass the running one by more than TAU (then O and l scale by
//     alpha), so P = exp(S - max) <= e^TAU stays inside f16. P to wg.p; l sums the rounded P;
//   workgroupUniformLoad of the "some row rescaled" flag (also the barrier that shows P);
//     if set: O through wg.s 16 dims at a time, each row times its alpha;
//   O += P V.
// At the end O goes through wg.s 16 dims at a time, each row divided by l, and the G rows are
// written: to `out` with one split, else to part_o with part_lse = max + log(l).
// (Loading the next step's K during this one, 8 more matrices held, measured 1-3% slower on
// the H200, 2026-12-01.)
//#include "lib/paged_kv.wgsl"

// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Slack of the running max: P = exp(S - max) <= e^8 (about 2981; f16 holds 65504).
const TAU: f32 = 8.0;
// Largest finite f16 (q is clamped into it before conversion).
const Q_LIMIT: f32 = 65504.0;
const ROWS: u32 = 16u;
// dim slices of 16 (result matrices of O, left matrices of Q, right matrices of a step's K/V)
const ND: u32 = HD / 16u;
// vec4 columns of a q row: one a lane
const HD4: u32 = HD / 4u;
// keys of a step each invocation of a row pair scores
const KH: u32 = KT / 2u;
// f16 rows of wg.q / wg.vt padded by 16 bytes (a matrix load's rows start on distinct banks)
const QS: u32 = HD + 8u;
// f32 rows of wg.s padded by 16 bytes
const SS: u32 = KT + 4u;
// f16 rows of wg.p padded by 16 bytes
const PS: u32 = KT + 8u;
const_assert HD == 128u && ND == 8u && HD4 == 32u;
const_assert KT == 16u;

// The workgroup memory is one struct (see paged_attention_tc.wgsl).
struct Wg {
  // [row][d]: q * scale
  q: array<f16, ROWS * QS>,
  // [key][d]: the last partial step's V, zeros past the context
  vt: array<f16, KT * QS>,
  // [row][key]: S; [row][16 dims]: an O slice
  s: array<f32, ROWS * SS>,
  // [row][key]: P
  p: array<f16, ROWS * PS>,
  // "some row rescales": step t sets flags[t % 2] and clears the other one for step t + 1
  flags: array<atomic<u32>, 2>,
}
var<workgroup> wg: Wg;

// Offsets into the workgroup arrays, computed by functions: Tint checks constant matrix
// offsets against the array even in the branches a variant never takes.
fn q_at(d: u32) -> u32 {
  return (d % ND) * 16u;
}

// Element index of key `key` of sequence `seq`, kv head `kvh`, in the cache (as f16).
fn kv_at(seq: u32, key: u32, kvh: u32) -> u32 {
  return 4u * paged_kv_base(seq, key, kvh);
}

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  // grid [num_kv_heads, num_splits, num_seqs]; seq_info and block_tables are read-only
  // storage read at uniform indices, so everything below that comes from them is uniform.
  let kvh = wid.x;
  let split = wid.y;
  let seq = wid.z;
  let group = params.num_q_heads / params.num_kv_heads;
  let head0 = kvh * group;
  let query_row = u32(seq_info[seq * 3u] + seq_info[seq * 3u + 1u] - 1);
  let context_len = u32(seq_info[seq * 3u + 2u]);
  let key_start = split * params.split_tokens;
  let key_end = min(context_len, key_start + params.split_tokens);
  let split_out = params.num_splits > 1u;
  let kv_stride = params.num_kv_heads * HD;
  // Invocations 2 row and 2 row + 1: row `row` (query head head0 + row when row < group),
  // keys half * KH .. half * KH + KH - 1 of each step, dims 8 half .. of each O slice.
  let row = lid / 2u;
  let half = lid % 2u;
  let head = head0 + row;
  // part_o / part_lse index of the row (with several splits)
  let part_at = (seq * params.num_q_heads + head) * params.num_splits + split;

  if (key_start >= key_end) {
    // a split with no keys (only with several splits): o = 0, lse = NEG
    if (row < group) {
      for (var c = 0u; c < HD4 / 2u; c++) {
        part_o[part_at * HD4 + half * (HD4 / 2u) + c] = vec4<f32>(0.0);
      }
      if (half == 0u) {
        part_lse[part_at] = NEG;
      }
    }
    return;
  }
  let n_steps = (key_end - key_start + KT - 1u) / KT;


  // wg.q = q * scale of the group's heads as f16, zero rows from group on.
  for (var r = 0u; r < ROWS; r++) {
    var x = vec4<f32>(0.0);
    if (r < group) {
      x = q[(query_row * params.num_q_heads + head0 + r) * HD4 + lid] * params.scale;
    }
    let h = vec4<f16>(clamp(x, vec4<f32>(-Q_LIMIT), vec4<f32>(Q_LIMIT)));
    let at = r * QS + 4u * lid;
    wg.q[at] = h.x;
    wg.q[at + 1u] = h.y;
    wg.q[at + 2u] = h.z;
    wg.q[at + 3u] = h.w;
  }
  if (lid == 0u) {
    atomicStore(&wg.flags[0], 0u);
    atomicStore(&wg.flags[1], 0u);
  }

  var m_run = NEG;
  // this invocation's share of the row's sum
  var l_run = 0.0;
  // o<d>: dims 16 d .. 16 d + 15
  var o0 = subgroup_matrix_result<f32, 16, 16>();
  var o1 = subgroup_matrix_result<f32, 16, 16>();
  var o2 = subgroup_matrix_result<f32, 16, 16>();
  var o3 = subgroup_matrix_result<f32, 16, 16>();
  var o4 = subgroup_matrix_result<f32, 16, 16>();
  var o5 = subgroup_matrix_result<f32, 16, 16>();
  var o6 = subgroup_matrix_result<f32, 16, 16>();
  var o7 = subgroup_matrix_result<f32, 16, 16>();

  for (var t = 0u; t < n_steps; t++) {
    let kb = key_start + t * KT;
    // the previous step's matrix loads from wg are done (and, before the first, wg.q is)
    workgroupBarrier();
    // the context's last tile when it is partial (split ends are multiples of 16)
    let staged = kb + KT > context_len;
    // the step's first key in the cache (its 16 keys lie in one block)
    let base = kv_at(seq, kb, kvh);
    let k0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base + 0u, kv_stride);
    let k1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base + 16u, kv_stride);
    let k2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base + 32u, kv_stride);
    let k3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base + 48u, kv_stride);
    let k4 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base + 64u, kv_stride);
    let k5 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base + 80u, kv_stride);
    let k6 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base + 96u, kv_stride);
    let k7 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&k_cache, base + 112u, kv_stride);

    // S = Q K^T (scale folded into q; keys past the context are masked below)
    var s = subgroup_matrix_result<f32, 16, 16>();
    s = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q, q_at(0u), QS), k0, s);
    s = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q, q_at(1u), QS), k1, s);
    s = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q, q_at(2u), QS), k2, s);
    s = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q, q_at(3u), QS), k3, s);
    s = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q, q_at(4u), QS), k4, s);
    s = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q, q_at(5u), QS), k5, s);
    s = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q, q_at(6u), QS), k6, s);
    s = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.q, q_at(7u), QS), k7, s);
    subgroupMatrixStore<row_major>(&wg.s, 0u, s, SS);

    // V of the step: from the cache now (its latency hides behind the softmax), or staged
    var v0 = subgroup_matrix_right<f16, 16, 16>();
    var v1 = subgroup_matrix_right<f16, 16, 16>();
    var v2 = subgroup_matrix_right<f16, 16, 16>();
    var v3 = subgroup_matrix_right<f16, 16, 16>();
    var v4 = subgroup_matrix_right<f16, 16, 16>();
    var v5 = subgroup_matrix_right<f16, 16, 16>();
    var v6 = subgroup_matrix_right<f16, 16, 16>();
    var v7 = subgroup_matrix_right<f16, 16, 16>();
    if (staged) {
      for (var e = lid; e < KT * HD; e += 32u) {
        let j = e / HD;
        let c = e % HD;
        var v = f16(0.0);
        if (kb + j < context_len) {
          v = v_cache[base + j * kv_stride + c];
        }
        wg.vt[j * QS + c] = v;
      }
    } else {
      v0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base + 0u, kv_stride);
      v1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base + 16u, kv_stride);
      v2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base + 32u, kv_stride);
      v3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base + 48u, kv_stride);
      v4 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base + 64u, kv_stride);
      v5 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base + 80u, kv_stride);
      v6 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base + 96u, kv_stride);
      v7 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&v_cache, base + 112u, kv_stride);
    }
    workgroupBarrier();

    // Row `row`'s softmax step over this invocation's half of the keys.
    var sv = array<f32, KH>();
    var mt = NEG;
    for (var j = 0u; j < KH; j++) {
      let key = half * KH + j;
      var sc = NEG;
      if (kb + key < key_end) {
        sc = wg.s[row * SS + key];
      }
      sv[j] = sc;
      mt = max(mt, sc);
    }
    mt = max(mt, subgroupShuffleXor(mt, 1u));
    var alpha = 1.0;
    // The first step always takes its max (its key 0 is real; O and l are still 0).
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
      var pr = 0.0;
      if (kb + key < key_end) {
        pr = exp(sv[j] - m_run);
      }
      let ph = f16(pr);
      wg.p[row * PS + key] = ph;
      l_run += f32(ph);
    }
    if (lid == 0u) {
      atomicStore(&wg.flags[(t + 1u) % 2u], 0u);
    }
    // (its barrier also makes wg.p and wg.vt visible to the matrix loads below)
    let rescale = workgroupUniformLoad(&wg.flags[t % 2u]);
    if (rescale != 0u) {
      o0 = rescaled(o0, row, half, alpha);
      o1 = rescaled(o1, row, half, alpha);
      o2 = rescaled(o2, row, half, alpha);
      o3 = rescaled(o3, row, half, alpha);
      o4 = rescaled(o4, row, half, alpha);
      o5 = rescaled(o5, row, half, alpha);
      o6 = rescaled(o6, row, half, alpha);
      o7 = rescaled(o7, row, half, alpha);
    }
    if (staged) {
      v0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.vt, q_at(0u), QS);
      v1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.vt, q_at(1u), QS);
      v2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.vt, q_at(2u), QS);
      v3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.vt, q_at(3u), QS);
      v4 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.vt, q_at(4u), QS);
      v5 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.vt, q_at(5u), QS);
      v6 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.vt, q_at(6u), QS);
      v7 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.vt, q_at(7u), QS);
    }

    // O += P V
    let pa = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.p, 0u, PS);
    o0 = subgroupMatrixMultiplyAccumulate(pa, v0, o0);
    o1 = subgroupMatrixMultiplyAccumulate(pa, v1, o1);
    o2 = subgroupMatrixMultiplyAccumulate(pa, v2, o2);
    o3 = subgroupMatrixMultiplyAccumulate(pa, v3, o3);
    o4 = subgroupMatrixMultiplyAccumulate(pa, v4, o4);
    o5 = subgroupMatrixMultiplyAccumulate(pa, v5, o5);
    o6 = subgroupMatrixMultiplyAccumulate(pa, v6, o6);
    o7 = subgroupMatrixMultiplyAccumulate(pa, v7, o7);
  }

  // The G rows' result, O / l, 16 dims at a time through wg.s.
  let l = l_run + subgroupShuffleXor(l_run, 1u);
  let inv = select(0.0, 1.0 / l, l > 0.0);
  var out_at = (query_row * params.num_q_heads + head) * HD4 + 2u * half;
  if (split_out) {
    out_at = part_at * HD4 + 2u * half;
    if (row < group && half == 0u) {
      part_lse[part_at] = m_run + log(l);
    }
  }
  workgroupBarrier();
  write_o(o0, row, half, group, split_out, out_at, 0u, inv);
  write_o(o1, row, half, group, split_out, out_at, 1u, inv);
  write_o(o2, row, half, group, split_out, out_at, 2u, inv);
  write_o(o3, row, half, group, split_out, out_at, 3u, inv);
  write_o(o4, row, half, group, split_out, out_at, 4u, inv);
  write_o(o5, row, half, group, split_out, out_at, 5u, inv);
  write_o(o6, row, half, group, split_out, out_at, 6u, inv);
  write_o(o7, row, half, group, split_out, out_at, 7u, inv);
}

// O slice `o` with each row times its alpha (through wg.s, barriers around: call it from uniform
// control flow).
fn rescaled(
  o: subgroup_matrix_result<f32, 16, 16>,
  row: u32,
  half: u32,
  alpha: f32,
) -> subgroup_matrix_result<f32, 16, 16> {
  subgroupMatrixStore<row_major>(&wg.s, 0u, o, SS);
  workgroupBarrier();
  scale_slice(row, half, alpha);
  workgroupBarrier();
  let r = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
  workgroupBarrier();
  return r;
}

// Writes O slice d (`o`) of the group's rows through wg.s, times inv (see write_slice).
fn write_o(
  o: subgroup_matrix_result<f32, 16, 16>,
  row: u32,
  half: u32,
  group: u32,
  split_out: bool,
  out_at: u32,
  d: u32,
  inv: f32,
) {
  subgroupMatrixStore<row_major>(&wg.s, 0u, o, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, d, inv);
  workgroupBarrier();
}

// Writes this invocation's 8 of a row's 16 dims of O slice d (in wg.s), times inv, for a row
// of the group: vec4 columns 4 d + 2 half and 4 d + 2 half + 1 (out_at has the 2 half).
fn write_slice(row: u32, half: u32, group: u32, split_out: bool, out_at: u32, d: u32, inv: f32) {
  if (row < group) {
    let at = row * SS + 8u * half;
    let a = vec4<f32>(wg.s[at], wg.s[at + 1u], wg.s[at + 2u], wg.s[at + 3u]) * inv;
    let b = vec4<f32>(wg.s[at + 4u], wg.s[at + 5u], wg.s[at + 6u], wg.s[at + 7u]) * inv;
    if (split_out) {
      part_o[out_at + 4u * d] = a;
      part_o[out_at + 4u * d + 1u] = b;
    } else {
      out[out_at + 4u * d] = a;
      out[out_at + 4u * d + 1u] = b;
    }
  }
}

// Scales this invocation's 8 of a row's 16 dims of the O slice in wg.s by alpha.
fn scale_slice(row: u32, half: u32, alpha: f32) {
  let at = row * SS + 8u * half;
  for (var c = 0u; c < 8u; c++) {
    wg.s[at + c] *= alpha;
  }
}
