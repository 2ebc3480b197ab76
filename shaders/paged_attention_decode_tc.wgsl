// Split-K paged decode attention on f16 subgroup matrices (tensor cores): the f16-tc variants
// of paged_attention_decode (same params, bindings, grid and outputs as the FMA forms; see
// kernels/paged_attention_decode.ts). Workgroup (kv head, split, seq) = ONE subgroup of 32
// (every matrix offset is then workgroup-uniform). The 16 rows of the left matrices are the
// G = num_q_heads / num_kv_heads query heads of the kv head (rows >= G: zero queries, never
// written), so each K/V matrix serves the whole GQA group; q * scale as f16 is loaded into
// ND = 8 left matrices once (through wg.k).
// Per step of KT keys (a variant constant, 16 or 32; keys past the split's end staged as
// zeros):
//   the step's K and V, loaded into registers during the previous step (every load of a
//     step in flight at once, each key's paged address its own, so a step may cross a KV
//     block), go to wg.k / wg.v as f16 rows [key][d]; barrier; the next step's loads are
//     issued (and the paged addresses of the step after, one key a lane: the block-table
//     read is off the loads' path);
//   S = Q K^T (K^T a col_major right matrix over wg.k) to wg.s; barrier;
//   invocations 2r and 2r + 1 run row r's online softmax over half the step's keys each (the
//     max meeting through a shuffle): a row takes a new max only when the step's scores pass
//     the running one by more than TAU (then O and l scale by alpha); otherwise
//     P = exp(S - max) <= e^TAU stays inside f16. P to wg.p as f16; l sums the rounded P;
//   workgroupUniformLoad of the "some row rescaled" flag (also the barrier that shows P);
//     if set (rare once the first keys have set the max): O through wg.s 16 dims at a time,
//     each row times its alpha;
//   O += P V (V a row_major right matrix over wg.v), 8 result matrices of 16 dims.
// At the end O goes through wg.s 16 dims at a time, each row divided by l, and the G rows are
// written: to `out` with one split, else to part_o with part_lse = max + log(l).
//#include "lib/paged_kv.wgsl"

// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Slack of the running max: P = exp(S - max) <= e^8 (about 2981; f16 holds 65504).
const TAU: f32 = 8.0;
// Largest finite f16 (q is clamped into it before conversion).
const Q_LIMIT: f32 = 65504.0;
const ROWS: u32 = 16u;
// dim slices of 16 (result matrices of O, left matrices of Q)
const ND: u32 = HD / 16u;
// vec4 columns of a K/V row: one a lane
const HD4: u32 = HD / 4u;
// key tiles of 16 a step
const NT: u32 = KT / 16u;
// keys of a step each invocation of a row pair scores
const KH: u32 = KT / 2u;
// f16 rows of wg.k / wg.v padded by 16 bytes (a matrix load's rows start on distinct banks)
const KS: u32 = HD + 8u;
// f32 rows of wg.s padded by 16 bytes (the row pairs' reads spread over the banks)
const SS: u32 = KT + 4u;
// f16 rows of wg.p padded by 16 bytes
const PS: u32 = KT + 8u;
const_assert HD == 128u && ND == 8u && HD4 == 32u;
const_assert KT == 16u || KT == 32u;
// wg.k holds the 16 q rows before the first step
const_assert KT >= ROWS;

// The workgroup memory is one struct: with the arrays as separate workgroup variables the
// H200's driver (580.159.04) gave the matrix stores and loads and the invocations' own reads
// and writes different views of them (see kernels/paged_attention_tc.ts).
struct Wg {
  // [key][d]: the step's K; before the first step [row][d]: q * scale
  k: array<f16, KT * KS>,
  // [key][d]: the step's V
  v: array<f16, KT * KS>,
  // [row][key]: S; [row][16 dims]: an O slice
  s: array<f32, ROWS * SS>,
  // [row][key]: P
  p: array<f16, ROWS * PS>,
  // "some row rescales": step t sets flags[t % 2] and clears the other one for step t + 1
  flags: array<atomic<u32>, 2>,
}
var<workgroup> wg: Wg;

// A step's K and V as a lane loaded them: column `lane` (a vec4) of keys 0 .. KT - 1.
struct KvRegs {
  k: array<vec4<f16>, KT>,
  v: array<vec4<f16>, KT>,
}

// Offsets into the workgroup arrays, computed by functions: Tint checks constant matrix
// offsets against the array even in the branches a variant never takes.
fn q_at(d: u32) -> u32 {
  return (d % ND) * 16u;
}

fn kv_at(j: u32, d: u32) -> u32 {
  return (j % NT) * 16u * KS + (d % ND) * 16u;
}

fn key_tile_at(j: u32) -> u32 {
  return (j % NT) * 16u;
}

// vec4 index of (key `key`, kv head `kvh`) of sequence `seq`, the key clamped to the split's
// last one (past the end it is never used, but stays a real address).
fn key_base(seq: u32, kvh: u32, key: u32, key_end: u32) -> u32 {
  return paged_kv_base(seq, min(key, key_end - 1u), kvh);
}

// The step of keys kb .. kb + KT - 1; `base` is lane l's key_base of key kb + l % KT. Zeros
// for keys at or past key_end. The address shuffles first, then every load.
fn load_step(base: u32, kb: u32, key_end: u32, lane: u32) -> KvRegs {
  var at = array<u32, KT>();
  for (var i = 0u; i < KT; i++) {
    at[i] = subgroupShuffle(base, i) + lane;
  }
  var r: KvRegs;
  for (var i = 0u; i < KT; i++) {
    if (kb + i < key_end) {
      r.k[i] = k_cache[at[i]];
      r.v[i] = v_cache[at[i]];
    }
  }
  return r;
}

fn store_step(r: KvRegs, lane: u32) {
  for (var i = 0u; i < KT; i++) {
    let at = i * KS + 4u * lane;
    let k = r.k[i];
    let v = r.v[i];
    wg.k[at] = k.x;
    wg.k[at + 1u] = k.y;
    wg.k[at + 2u] = k.z;
    wg.k[at + 3u] = k.w;
    wg.v[at] = v.x;
    wg.v[at + 1u] = v.y;
    wg.v[at + 2u] = v.z;
    wg.v[at + 3u] = v.w;
  }
}

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  // grid [num_kv_heads, num_splits, num_seqs]; seq_info is read-only storage read at a
  // uniform index, so everything below that comes from it is workgroup-uniform.
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
  let n_keys = key_end - key_start;
  let n_steps = (n_keys + KT - 1u) / KT;

  // The first step's loads go out before q is staged.
  var base = key_base(seq, kvh, key_start + lid % KT, key_end);
  var next = load_step(base, key_start, key_end, lid);
  base = key_base(seq, kvh, key_start + KT + lid % KT, key_end);

  // wg.k = q * scale of the group's heads as f16, zero rows from group on.
  for (var r = 0u; r < ROWS; r++) {
    var x = vec4<f32>(0.0);
    if (r < group) {
      x = q[(query_row * params.num_q_heads + head0 + r) * HD4 + lid] * params.scale;
    }
    let h = vec4<f16>(clamp(x, vec4<f32>(-Q_LIMIT), vec4<f32>(Q_LIMIT)));
    let at = r * KS + 4u * lid;
    wg.k[at] = h.x;
    wg.k[at + 1u] = h.y;
    wg.k[at + 2u] = h.z;
    wg.k[at + 3u] = h.w;
  }
  if (lid == 0u) {
    atomicStore(&wg.flags[0], 0u);
    atomicStore(&wg.flags[1], 0u);
  }
  workgroupBarrier();
  let q0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.k, q_at(0u), KS);
  let q1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.k, q_at(1u), KS);
  let q2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.k, q_at(2u), KS);
  let q3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.k, q_at(3u), KS);
  let q4 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.k, q_at(4u), KS);
  let q5 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.k, q_at(5u), KS);
  let q6 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.k, q_at(6u), KS);
  let q7 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.k, q_at(7u), KS);

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
    // the previous step's (or q's) matrix loads from wg.k / wg.v / wg.p are done
    workgroupBarrier();
    store_step(next, lid);
    workgroupBarrier();
    if (t + 1u < n_steps) {
      next = load_step(base, kb + KT, key_end, lid);
      base = key_base(seq, kvh, kb + 2u * KT + lid % KT, key_end);
    }

    // S = Q K^T (scale folded into q)
    var s0 = subgroup_matrix_result<f32, 16, 16>();
    var s1 = subgroup_matrix_result<f32, 16, 16>();
    s0 = subgroupMatrixMultiplyAccumulate(q0, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(0u, 0u), KS), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q1, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(0u, 1u), KS), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q2, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(0u, 2u), KS), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q3, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(0u, 3u), KS), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q4, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(0u, 4u), KS), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q5, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(0u, 5u), KS), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q6, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(0u, 6u), KS), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q7, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(0u, 7u), KS), s0);
    if (NT > 1u) {
      s1 = subgroupMatrixMultiplyAccumulate(q0, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(1u, 0u), KS), s1);
      s1 = subgroupMatrixMultiplyAccumulate(q1, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(1u, 1u), KS), s1);
      s1 = subgroupMatrixMultiplyAccumulate(q2, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(1u, 2u), KS), s1);
      s1 = subgroupMatrixMultiplyAccumulate(q3, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(1u, 3u), KS), s1);
      s1 = subgroupMatrixMultiplyAccumulate(q4, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(1u, 4u), KS), s1);
      s1 = subgroupMatrixMultiplyAccumulate(q5, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(1u, 5u), KS), s1);
      s1 = subgroupMatrixMultiplyAccumulate(q6, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(1u, 6u), KS), s1);
      s1 = subgroupMatrixMultiplyAccumulate(q7, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.k, kv_at(1u, 7u), KS), s1);
    }
    subgroupMatrixStore<row_major>(&wg.s, key_tile_at(0u), s0, SS);
    if (NT > 1u) {
      subgroupMatrixStore<row_major>(&wg.s, key_tile_at(1u), s1, SS);
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
    // (its barrier also makes wg.p visible to the matrix loads below)
    let rescale = workgroupUniformLoad(&wg.flags[t % 2u]);
    if (rescale != 0u) {
      subgroupMatrixStore<row_major>(&wg.s, 0u, o0, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o0 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
      workgroupBarrier();
      subgroupMatrixStore<row_major>(&wg.s, 0u, o1, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o1 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
      workgroupBarrier();
      subgroupMatrixStore<row_major>(&wg.s, 0u, o2, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o2 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
      workgroupBarrier();
      subgroupMatrixStore<row_major>(&wg.s, 0u, o3, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o3 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
      workgroupBarrier();
      subgroupMatrixStore<row_major>(&wg.s, 0u, o4, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o4 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
      workgroupBarrier();
      subgroupMatrixStore<row_major>(&wg.s, 0u, o5, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o5 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
      workgroupBarrier();
      subgroupMatrixStore<row_major>(&wg.s, 0u, o6, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o6 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
      workgroupBarrier();
      subgroupMatrixStore<row_major>(&wg.s, 0u, o7, SS);
      workgroupBarrier();
      scale_slice(row, half, alpha);
      workgroupBarrier();
      o7 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, 0u, SS);
      // (wg.s is written again only after the next step's first barriers)
    }

    // O += P V
    let pa = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.p, key_tile_at(0u), PS);
    var pb = pa;
    if (NT > 1u) {
      pb = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.p, key_tile_at(1u), PS);
    }
    o0 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(0u, 0u), KS), o0);
    o1 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(0u, 1u), KS), o1);
    o2 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(0u, 2u), KS), o2);
    o3 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(0u, 3u), KS), o3);
    o4 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(0u, 4u), KS), o4);
    o5 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(0u, 5u), KS), o5);
    o6 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(0u, 6u), KS), o6);
    o7 = subgroupMatrixMultiplyAccumulate(pa, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(0u, 7u), KS), o7);
    if (NT > 1u) {
      o0 = subgroupMatrixMultiplyAccumulate(pb, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(1u, 0u), KS), o0);
      o1 = subgroupMatrixMultiplyAccumulate(pb, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(1u, 1u), KS), o1);
      o2 = subgroupMatrixMultiplyAccumulate(pb, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(1u, 2u), KS), o2);
      o3 = subgroupMatrixMultiplyAccumulate(pb, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(1u, 3u), KS), o3);
      o4 = subgroupMatrixMultiplyAccumulate(pb, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(1u, 4u), KS), o4);
      o5 = subgroupMatrixMultiplyAccumulate(pb, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(1u, 5u), KS), o5);
      o6 = subgroupMatrixMultiplyAccumulate(pb, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(1u, 6u), KS), o6);
      o7 = subgroupMatrixMultiplyAccumulate(pb, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.v, kv_at(1u, 7u), KS), o7);
    }
  }

  // The G rows' result, O / l, 16 dims at a time through wg.s (free: the last step's reads of
  // it came before its workgroupUniformLoad).
  let l = l_run + subgroupShuffleXor(l_run, 1u);
  let inv = select(0.0, 1.0 / l, l > 0.0);
  var out_at = (query_row * params.num_q_heads + head) * HD4 + 2u * half;
  if (split_out) {
    out_at = part_at * HD4 + 2u * half;
    if (row < group && half == 0u) {
      part_lse[part_at] = m_run + log(l);
    }
  }
  subgroupMatrixStore<row_major>(&wg.s, 0u, o0, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, 0u, inv);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&wg.s, 0u, o1, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, 1u, inv);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&wg.s, 0u, o2, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, 2u, inv);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&wg.s, 0u, o3, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, 3u, inv);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&wg.s, 0u, o4, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, 4u, inv);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&wg.s, 0u, o5, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, 5u, inv);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&wg.s, 0u, o6, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, 6u, inv);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&wg.s, 0u, o7, SS);
  workgroupBarrier();
  write_slice(row, half, group, split_out, out_at, 7u, inv);
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
