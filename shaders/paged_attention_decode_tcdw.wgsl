// Split-K paged decode attention on f16 subgroup matrices with K and V staged through
// workgroup memory as 16-byte words: the f16-tcdw variant of paged_attention_decode (same
// params, grid and outputs as f16-tcd, whose softmax, rescale and output it keeps; K/V bound
// as vec4<u32> words of 8 f16, see Variant.wideWords). Why: f16-tcd loads its K and V
// matrices straight from the cache, and on the H200 a subgroup-matrix load from storage costs
// an SM 28-55x what one from workgroup memory does (probe-sgmat, 2026-12-01): 16 of them a
// step held f16-tcd at ~1.4 TB/s, a third of the read roof. Here each step's 16 keys of K and
// V (2 x 4 KB) arrive as 16 words a lane, two keys a load instruction (lanes 0-15 one key's
// 256 bytes, lanes 16-31 the next one's), are stored to wg.a as [key][d] f16 rows, and the
// matrices load from there: K at the step's start, V over it once the Q K^T products have loaded
// K (during the softmax, before the barrier that makes P visible). Each kind of word is loaded
// for the next step right after this step's store, so its memory latency hides behind a step. Keys past
// the context read as zero words (a stale slot must not meet a zero probability as Inf or
// NaN), so the context's partial last tile needs no path of its own.
// q * scale goes through wg.a once, before the first step, into 8 left matrices held in
// registers: no q array stays in workgroup memory. Each workgroup is one subgroup, so the
// workgroups an SM holds are bounded by their workgroup memory: on the H200 the form that kept
// q there (4.3 KB more, 15.1 KB) took 64 x 8192 decode steps 62.4 ms against 56.2 without it;
// with a buffer each for K and V (10.8 KB) the kernel alone read 52% of the roof at 64 x 8192
// and 8 x 131072, with V over K (6.4 KB) 64-67%, and 64 x 8192 decode steps took 56.2 -> 51.5
// ms, 32 x 8192 40.4 -> 39.3, 32 x 1024 30.8 -> 30.0 (64 x 1024 36.9 -> 37.1: its splits of 256
// keys are 16 steps each, and 41.5% alone fell to 37.5%).
// Needs head_dim 128, block_size a multiple of 16 and split_tokens a multiple of 16 (or one
// split): a step's 16 keys lie in one KV block, kv_words = num_kv_heads * 16 words apart.
//#include "lib/paged_kv.wgsl"
//#include "lib/stage_words.wgsl"
//#include "lib/attention_steps_tc.wgsl"

// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Slack of the running max: P = exp(S - max) <= e^8 (about 2981; f16 holds 65504).
const TAU: f32 = 8.0;
// Largest finite f16 (q is clamped into it before conversion).
const Q_LIMIT: f32 = 65504.0;
const ROWS: u32 = 16u;
// one subgroup loads and stages a step's K and V words (lib/attention_steps_tc.wgsl)
const KV_LANES: u32 = 32u;
// dim slices of 16 (result matrices of O, left matrices of Q, right matrices of a step's K/V)
const ND: u32 = HD / 16u;
// vec4 columns of a q row: one a lane
const HD4: u32 = HD / 4u;
// keys of a step each invocation of a row pair scores
const KH: u32 = KT / 2u;
// f16 rows of wg.a and wg.b padded by 16 bytes (a matrix load's rows start on distinct banks)
const QS: u32 = HD + 8u;
// f32 rows of wg.s_tile padded by 16 bytes
const SS: u32 = KT + 4u;
// f16 rows of P (wg.b) padded by 16 bytes
const PS: u32 = KT + 8u;
const_assert HD == 128u && ND == 8u && HD4 == 32u;
const_assert KT == 16u;

// The workgroup memory is one struct (see paged_attention_tc.wgsl).
struct Wg {
  // [key][d]: the step's K, then its V (put8a of lib/stage_words.wgsl)
  a: array<f16, KT * QS>,
  // [row][key]: P (named b for lib/stage_words.wgsl, whose put8b this shader does not call)
  b: array<f16, ROWS * PS>,
  // [row][key]: S; [row][16 dims]: an O slice
  s_tile: array<f32, ROWS * SS>,
  // "some row rescales": step t sets flags[t % 2] and clears the other one for step t + 1
  flags: array<atomic<u32>, 2>,
}
var<workgroup> wg: Wg;

// Offsets into the workgroup arrays, computed by functions: Tint checks constant matrix
// offsets against the array even in the branches a variant never takes.
fn q_at(d: u32) -> u32 {
  return (d % ND) * 16u;
}

// q's left matrix of dims 16 d .. as staged in wg.a before the first step.
fn q_reg(d: u32) -> subgroup_matrix_left<f16, 16, 16> {
  return subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, q_at(d), QS);
}

// V's right matrix of dims 16 d .. 16 d + 15 from wg.a.
fn v_at(d: u32) -> subgroup_matrix_right<f16, 16, 16> {
  return subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, q_at(d), QS);
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
  let kv_words = params.num_kv_heads * (HD / 8u);
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
  // the first step's words go out before q is staged
  var k_words = load_words(seq, kvh, key_start, context_len, kv_words, lid, false);
  var v_words = load_words(seq, kvh, key_start, context_len, kv_words, lid, true);


  // wg.a = q * scale of the group's heads as f16, zero rows from group on (until the first step)
  for (var r = 0u; r < ROWS; r++) {
    var x = vec4<f32>(0.0);
    if (r < group) {
      x = q[(query_row * params.num_q_heads + head0 + r) * HD4 + lid] * params.scale;
    }
    let h = vec4<f16>(clamp(x, vec4<f32>(-Q_LIMIT), vec4<f32>(Q_LIMIT)));
    let at = r * QS + 4u * lid;
    wg.a[at] = h.x;
    wg.a[at + 1u] = h.y;
    wg.a[at + 2u] = h.z;
    wg.a[at + 3u] = h.w;
  }
  if (lid == 0u) {
    atomicStore(&wg.flags[0], 0u);
    atomicStore(&wg.flags[1], 0u);
  }

  // q's left matrices from wg.a (free until the first step's store, which waits for these
  // loads at its barrier)
  var q0 = subgroup_matrix_left<f16, 16, 16>();
  var q1 = subgroup_matrix_left<f16, 16, 16>();
  var q2 = subgroup_matrix_left<f16, 16, 16>();
  var q3 = subgroup_matrix_left<f16, 16, 16>();
  var q4 = subgroup_matrix_left<f16, 16, 16>();
  var q5 = subgroup_matrix_left<f16, 16, 16>();
  var q6 = subgroup_matrix_left<f16, 16, 16>();
  var q7 = subgroup_matrix_left<f16, 16, 16>();
  {
    workgroupBarrier();
    q0 = q_reg(0u);
    q1 = q_reg(1u);
    q2 = q_reg(2u);
    q3 = q_reg(3u);
    q4 = q_reg(4u);
    q5 = q_reg(5u);
    q6 = q_reg(6u);
    q7 = q_reg(7u);
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
    // the next step's first key (the last step loads its own again: in cache, never stored)
    let kn = min(kb + KT, key_start + (n_steps - 1u) * KT);
    // the previous step's V loads from wg.a are done (and, before the first, the q matrices')
    workgroupBarrier();
    store_words(k_words, lid);
    workgroupBarrier();
    k_words = load_words(seq, kvh, kn, context_len, kv_words, lid, false);

    // S = Q K^T (scale folded into q; keys past the context are masked below)
    var s = subgroup_matrix_result<f32, 16, 16>();
    s = subgroupMatrixMultiplyAccumulate(q0, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(0u), QS), s);
    s = subgroupMatrixMultiplyAccumulate(q1, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(1u), QS), s);
    s = subgroupMatrixMultiplyAccumulate(q2, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(2u), QS), s);
    s = subgroupMatrixMultiplyAccumulate(q3, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(3u), QS), s);
    s = subgroupMatrixMultiplyAccumulate(q4, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(4u), QS), s);
    s = subgroupMatrixMultiplyAccumulate(q5, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(5u), QS), s);
    s = subgroupMatrixMultiplyAccumulate(q6, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(6u), QS), s);
    s = subgroupMatrixMultiplyAccumulate(q7, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(7u), QS), s);
    subgroupMatrixStore<row_major>(&wg.s_tile, 0u, s, SS);
    // (the K loads above are done: V takes wg.a, visible after the barrier before P V)
    workgroupBarrier();
    store_words(v_words, lid);
    v_words = load_words(seq, kvh, kn, context_len, kv_words, lid, true);

    // Row `row`'s softmax step over this invocation's half of the keys.
    var sv = array<f32, KH>();
    var mt = NEG;
    for (var j = 0u; j < KH; j++) {
      let key = half * KH + j;
      var sc = NEG;
      if (kb + key < key_end) {
        sc = wg.s_tile[row * SS + key];
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
      wg.b[row * PS + key] = ph;
      l_run += f32(ph);
    }
    if (lid == 0u) {
      atomicStore(&wg.flags[(t + 1u) % 2u], 0u);
    }
    // (its barrier also makes P in wg.b and V in wg.a visible to the matrix loads below)
    let rescale = workgroupUniformLoad(&wg.flags[t % 2u]);
    if (rescale != 0u) {
      o0 = rescaled(o0, 0u, row, half, alpha);
      o1 = rescaled(o1, 0u, row, half, alpha);
      o2 = rescaled(o2, 0u, row, half, alpha);
      o3 = rescaled(o3, 0u, row, half, alpha);
      o4 = rescaled(o4, 0u, row, half, alpha);
      o5 = rescaled(o5, 0u, row, half, alpha);
      o6 = rescaled(o6, 0u, row, half, alpha);
      o7 = rescaled(o7, 0u, row, half, alpha);
    }
    // O += P V
    let pa = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.b, 0u, PS);
    o0 = subgroupMatrixMultiplyAccumulate(pa, v_at(0u), o0);
    o1 = subgroupMatrixMultiplyAccumulate(pa, v_at(1u), o1);
    o2 = subgroupMatrixMultiplyAccumulate(pa, v_at(2u), o2);
    o3 = subgroupMatrixMultiplyAccumulate(pa, v_at(3u), o3);
    o4 = subgroupMatrixMultiplyAccumulate(pa, v_at(4u), o4);
    o5 = subgroupMatrixMultiplyAccumulate(pa, v_at(5u), o5);
    o6 = subgroupMatrixMultiplyAccumulate(pa, v_at(6u), o6);
    o7 = subgroupMatrixMultiplyAccumulate(pa, v_at(7u), o7);
  }

  // The G rows' result, O / l, 16 dims at a time through wg.s_tile.
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


// Writes O slice d (`o`) of the group's rows, times inv, for a row of the group: vec4 columns
// 4 d + 2 half and 4 d + 2 half + 1 (out_at has the 2 half) of part_o or out (lib's
// o_slice_dims: call it from uniform control flow).
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
  let v = o_slice_dims(o, 0u, row, half, inv);
  if (row < group) {
    if (split_out) {
      part_o[out_at + 4u * d] = v[0];
      part_o[out_at + 4u * d + 1u] = v[1];
    } else {
      out[out_at + 4u * d] = v[0];
      out[out_at + 4u * d + 1u] = v[1];
    }
  }
}
