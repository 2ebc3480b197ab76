// Split-K paged decode attention on f16 subgroup matrices, two subgroups a workgroup that split
// the head's dims: the f16-tcdw2 variant of paged_attention_decode (same params, grid, staging
// and outputs as f16-tcdw, paged_attention_decode_tcdw.wgsl, whose comments say why K and V go
// through workgroup memory as 16-byte words, V over K). Subgroup sg holds q's left matrices and
// O's result matrices of dims 64 sg .. 64 sg + 63 only (f16-tcdw2; f16-tcdw4, four subgroups
// of 32 dims each, works the same way), so each invocation keeps half of
// f16-tcdw's q, O and next-step words in registers, and each subgroup's chain of S products is 4
// long instead of 8: the two halves of S = Q K^T meet in workgroup memory, where the softmax adds
// them. Why: on the H200 (2026-12-01) f16-tcdw with its loads served from cache still took 212
// µs a layer at 64 x 8192, 89% of the time the KV bytes take at the read roof, and with its
// softmax and products left out it read 83% of the roof: the one subgroup's chain of work each
// step, not the memory, bounds it.
// Needs head_dim 128, block_size a multiple of 16 and split_tokens a multiple of 16 (or one
// split), as f16-tcdw.
// This is the body of paged_attention_decode_tcdw2.wgsl (q read as stored) and
// paged_attention_decode_tcdw2_qk.wgsl (q normed and rotated from the projection here, the new
// key's K and V written first), which include it after the hooks that say how q arrives
// (decode_new_kv, decode_q_prepare, decode_q: lib/decode_q_stored.wgsl, lib/decode_q_qkv.wgsl).

// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Slack of the running max: P = exp(S - max) <= e^8 (about 2981; f16 holds 65504).
const TAU: f32 = 8.0;
// Largest finite f16 (q is clamped into it before conversion).
const Q_LIMIT: f32 = 65504.0;
const ROWS: u32 = 16u;
// subgroups of 32 a workgroup: each takes 1 / NSG of the head's dims
const NSG: u32 = WG / 32u;
// all subgroups load and stage a step's K and V words (lib/attention_steps_tc.wgsl)
const KV_LANES: u32 = WG;
// dim slices of 16 of the head, and of a subgroup's share
const ND: u32 = HD / 16u;
const NDS: u32 = ND / NSG;
// vec4 columns of a q row
const HD4: u32 = HD / 4u;
// rows the softmax takes: all 16 of the matrices' rows, or with HALF (f16-tcdw2h, for groups of
// at most 8 query heads a kv head) the first 8: rows 8-15 of S are padding (q's zero rows),
// their P and factors are zeroed once before the first step (below: the device may leave
// workgroup memory uninitialised) and never written after, so twice the invocations share each
// real row and each scores half the keys of a step: the step's chain of softmax work is half as
// long.
const SROWS: u32 = ROWS - (ROWS / 2u) * HALF;
// invocations of a softmax row, and the keys of a step each scores
const RL: u32 = WG / SROWS;
const KQ: u32 = KT / RL;
// f16 rows of wg.a padded by 16 bytes (a matrix load's rows start on distinct banks; 8 bytes
// were 11-20% slower on the H200)
const QS: u32 = HD + 8u;
// f32 rows of wg.s_tile and f16 rows of P (wg.b) padded by 16 bytes (SPAD 1) or not at all
// (SPAD 0, f16-tcdw2h: 768 bytes less a workgroup, 6,984 with 2 subgroups; the H200 still holds
// 6 of them an SM, not 7: kernels/paged_attention_decode.ts, TCDW2H)
const SS: u32 = KT + 4u * SPAD;
const PS: u32 = KT + 8u * SPAD;
const_assert HD == 128u && ND == 8u && HD4 == 32u;
const_assert KT == 16u && (NSG == 2u || NSG == 4u);
const_assert HALF <= 1u && RL <= 16u && KQ >= 1u && SPAD <= 1u;

// The workgroup memory is one struct (see paged_attention_tc.wgsl).
struct Wg {
  // [key][d]: the step's K, then its V (put8a of lib/stage_words.wgsl); q before the first step
  a: array<f16, KT * QS>,
  // [row][key]: P (named b for lib/stage_words.wgsl, whose put8b this shader does not call)
  b: array<f16, ROWS * PS>,
  // per subgroup [row][key]: its half of S; [row][16 dims]: an O slice
  s_tile: array<f32, NSG * ROWS * SS>,
  // per row: this step's rescale factor; after the last step the row's sum
  row_f: array<f32, ROWS>,
  // "some row rescales": step t sets flags[t % 2] and clears the other one for step t + 1
  flags: array<atomic<u32>, 2>,
}
var<workgroup> wg: Wg;

// Offsets into the workgroup arrays, computed by functions: Tint checks constant matrix
// offsets against the array even in the branches a variant never takes.
fn d_at(d: u32) -> u32 {
  return (d % ND) * 16u;
}

@compute @workgroup_size(WG)
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
  // The softmax's view: invocations RL row .. RL row + RL - 1 score row `row` (query head head0
  // + row when row < group; rows below SROWS), keys KQ quarter .. KQ quarter + KQ - 1 of each
  // step.
  let row = lid / RL;
  let quarter = lid % RL;
  // The matrices' view: subgroup sg holds dims 16 NDS sg ..; in its rows of wg.s_tile from `base`,
  // invocation 2 orow + ohalf (of the subgroup) takes dims 8 ohalf .. of row orow of a slice.
  let sg = lid / 32u;
  let base = sg * ROWS * SS;
  let orow = (lid % 32u) / 2u;
  let ohalf = lid % 2u;
  let d0 = sg * NDS;

  if (key_start >= key_end) {
    // a split with no keys (only with several splits): o = 0, lse = NEG
    if (row < group) {
      let at = (seq * params.num_q_heads + head0 + row) * params.num_splits + split;
      for (var c = 0u; c < HD4 / RL; c++) {
        part_o[at * HD4 + quarter * (HD4 / RL) + c] = vec4<f32>(0.0);
      }
      if (quarter == 0u) {
        part_lse[at] = NEG;
      }
    }
    return;
  }
  let n_steps = (key_end - key_start + KT - 1u) / KT;
  let ds = DecodeSplit(split, seq, kvh, group, head0, HD4, query_row, context_len, key_start, key_end);
  // (the split that holds the new key writes its K and V first where the hooks take them)
  decode_new_kv(ds, lid);
  // the first step's words go out before q is staged
  var k_words = load_words(seq, kvh, key_start, context_len, kv_words, lid, false);
  var v_words = load_words(seq, kvh, key_start, context_len, kv_words, lid, true);
  decode_q_prepare(ds, lid);

  // wg.a = q * scale of the group's heads as f16, zero rows from group on (until the first
  // step): invocation lid takes vec4 column lid % 32 of rows sg, sg + NSG, ...
  for (var i = 0u; i < ROWS / NSG; i++) {
    let r = sg + NSG * i;
    let c = lid % 32u;
    var x = vec4<f32>(0.0);
    if (r < group) {
      x = decode_q(ds, r, c) * params.scale;
    }
    let h = vec4<f16>(clamp(x, vec4<f32>(-Q_LIMIT), vec4<f32>(Q_LIMIT)));
    let at = r * QS + 4u * c;
    wg.a[at] = h.x;
    wg.a[at + 1u] = h.y;
    wg.a[at + 2u] = h.z;
    wg.a[at + 3u] = h.w;
  }
  if (lid == 0u) {
    atomicStore(&wg.flags[0], 0u);
    atomicStore(&wg.flags[1], 0u);
  }
  // with HALF the softmax never writes P's rows past SROWS nor their factors: zeros (the
  // device may leave workgroup memory uninitialised; those rows feed only O rows that are
  // never written, but stay finite)
  for (var i = lid; i < (ROWS - SROWS) * PS; i += WG) {
    wg.b[SROWS * PS + i] = f16(0.0);
  }
  if (lid >= SROWS && lid < ROWS) {
    wg.row_f[lid] = 0.0;
  }

  // this subgroup's q matrices from wg.a (free until the first step's store, which waits for
  // these loads at its barrier)
  workgroupBarrier();
  let q0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, d_at(d0), QS);
  let q1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, d_at(d0 + 1u), QS);
  var q2 = subgroup_matrix_left<f16, 16, 16>();
  var q3 = subgroup_matrix_left<f16, 16, 16>();
  if (NDS > 2u) {
    q2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, d_at(d0 + 2u), QS);
    q3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, d_at(d0 + 3u), QS);
  }

  var m_run = NEG;
  // this invocation's share of the row's sum
  var l_run = 0.0;
  // o<j>: dims 16 (d0 + j) .. of the subgroup's half
  var o0 = subgroup_matrix_result<f32, 16, 16>();
  var o1 = subgroup_matrix_result<f32, 16, 16>();
  var o2 = subgroup_matrix_result<f32, 16, 16>();
  var o3 = subgroup_matrix_result<f32, 16, 16>();

  for (var t = 0u; t < n_steps; t++) {
    let kb = key_start + t * KT;
    // the next step's first key (the last step loads its own again: in cache, never stored)
    let kn = min(kb + KT, key_start + (n_steps - 1u) * KT);
    // the previous step's V loads from wg.a are done (and, before the first, the q matrices')
    workgroupBarrier();
    store_words(k_words, lid);
    workgroupBarrier();
    k_words = load_words(seq, kvh, kn, context_len, kv_words, lid, false);

    // this subgroup's half of S = Q K^T (scale folded into q; keys past the context are
    // masked below)
    var s = subgroup_matrix_result<f32, 16, 16>();
    s = subgroupMatrixMultiplyAccumulate(q0, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, d_at(d0), QS), s);
    s = subgroupMatrixMultiplyAccumulate(q1, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, d_at(d0 + 1u), QS), s);
    if (NDS > 2u) {
      s = subgroupMatrixMultiplyAccumulate(q2, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, d_at(d0 + 2u), QS), s);
      s = subgroupMatrixMultiplyAccumulate(q3, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, d_at(d0 + 3u), QS), s);
    }
    subgroupMatrixStore<row_major>(&wg.s_tile, base, s, SS);
    // (both subgroups' K loads are done: V takes wg.a, visible after the barrier before P V)
    workgroupBarrier();
    store_words(v_words, lid);
    v_words = load_words(seq, kvh, kn, context_len, kv_words, lid, true);

    // Row `row`'s softmax step over this invocation's quarter of the keys, S's halves added.
    var sv = array<f32, KQ>();
    var mt = NEG;
    for (var j = 0u; j < KQ; j++) {
      let key = quarter * KQ + j;
      var sc = NEG;
      if (kb + key < key_end) {
        sc = 0.0;
        for (var g = 0u; g < NSG; g++) {
          sc += wg.s_tile[g * ROWS * SS + row * SS + key];
        }
      }
      sv[j] = sc;
      mt = max(mt, sc);
    }
    mt = max(mt, subgroupShuffleXor(mt, 1u));
    mt = max(mt, subgroupShuffleXor(mt, 2u));
    if (RL > 4u) {
      mt = max(mt, subgroupShuffleXor(mt, 4u));
    }
    if (RL > 8u) {
      mt = max(mt, subgroupShuffleXor(mt, 8u));
    }
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
    for (var j = 0u; j < KQ; j++) {
      let key = quarter * KQ + j;
      var pr = 0.0;
      if (kb + key < key_end) {
        pr = exp(sv[j] - m_run);
      }
      let ph = f16(pr);
      wg.b[row * PS + key] = ph;
      l_run += f32(ph);
    }
    if (quarter == 0u) {
      wg.row_f[row] = alpha;
    }
    if (lid == 0u) {
      atomicStore(&wg.flags[(t + 1u) % 2u], 0u);
    }
    // (its barrier also makes P, V and the rows' alphas visible to the loads below)
    let rescale = workgroupUniformLoad(&wg.flags[t % 2u]);
    if (rescale != 0u) {
      let a = wg.row_f[orow];
      o0 = rescaled(o0, base, orow, ohalf, a);
      o1 = rescaled(o1, base, orow, ohalf, a);
      if (NDS > 2u) {
        o2 = rescaled(o2, base, orow, ohalf, a);
        o3 = rescaled(o3, base, orow, ohalf, a);
      }
    }
    // O += P V over this subgroup's dims
    let pa = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.b, 0u, PS);
    o0 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, d_at(d0), QS), o0);
    o1 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, d_at(d0 + 1u), QS), o1);
    if (NDS > 2u) {
      o2 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, d_at(d0 + 2u), QS), o2);
      o3 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, d_at(d0 + 3u), QS), o3);
    }
  }

  // Each row's sum over its RL invocations, through wg.row_f to the matrices' view (the last
  // step's alphas are read before the barrier).
  var l4 = l_run + subgroupShuffleXor(l_run, 1u);
  l4 += subgroupShuffleXor(l4, 2u);
  if (RL > 4u) {
    l4 += subgroupShuffleXor(l4, 4u);
  }
  if (RL > 8u) {
    l4 += subgroupShuffleXor(l4, 8u);
  }
  if (split_out && row < group && quarter == 0u) {
    let at = (seq * params.num_q_heads + head0 + row) * params.num_splits + split;
    part_lse[at] = m_run + log(l4);
  }
  workgroupBarrier();
  if (quarter == 0u) {
    wg.row_f[row] = l4;
  }
  workgroupBarrier();
  let lo = wg.row_f[orow];
  let inv = select(0.0, 1.0 / lo, lo > 0.0);
  let head = head0 + orow;
  var out_at = (query_row * params.num_q_heads + head) * HD4 + 2u * ohalf;
  if (split_out) {
    out_at = ((seq * params.num_q_heads + head) * params.num_splits + split) * HD4 + 2u * ohalf;
  }
  write_o(o0, base, orow, ohalf, group, split_out, out_at, d0, inv);
  write_o(o1, base, orow, ohalf, group, split_out, out_at, d0 + 1u, inv);
  if (NDS > 2u) {
    write_o(o2, base, orow, ohalf, group, split_out, out_at, d0 + 2u, inv);
    write_o(o3, base, orow, ohalf, group, split_out, out_at, d0 + 3u, inv);
  }
}

// Writes O slice d (`o`, through the subgroup's rows of wg.s_tile from `base`) of the group's
// rows, times inv: vec4 columns 4 d + 2 half and 4 d + 2 half + 1 (out_at has the 2 half) of
// part_o or out (lib's o_slice_dims: call it from uniform control flow).
fn write_o(
  o: subgroup_matrix_result<f32, 16, 16>,
  base: u32,
  row: u32,
  half: u32,
  group: u32,
  split_out: bool,
  out_at: u32,
  d: u32,
  inv: f32,
) {
  let v = o_slice_dims(o, base, row, half, inv);
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
