// Paged causal attention on f16 subgroup matrices (tensor cores), several subgroups a
// workgroup: the computation, params, bindings and masking of paged_attention_tc.wgsl (see
// there, and kernels/paged_attention_tc.ts), with the K and V of each step staged once in
// workgroup memory for QSG subgroups instead of loaded by every subgroup straight from the
// paged cache (probe-sgmat on the H200: a matrix load from workgroup memory is 28-55x
// cheaper than from storage). Workgroup (tile block, seq, kv head), QSG subgroups of 32;
// subgroup g owns the 16 query rows of q tile QSG * block + g (floor(16 / G) tokens x the
// G query heads of a kv head). The workgroup steps over the keys its last token sees, KW =
// 16 keys a step; each row masks the keys past its own token.
// Step t (K and V of the step in buffer t % 2 of wg.kv, [key][d] rows: K, then V):
//   S = Q K^T from the staged K; S to the subgroup's wg.s_tile; every invocation stores the
//     next step's words (loaded during the previous step, zeros past the context) into the
//     other buffer and loads the words of the step after;
//   barrier; each row's lazy online softmax as in paged_attention_tc.wgsl (invocations 2r and
//     2r + 1 of a subgroup share row r); a row that takes a new max raises the workgroup's
//     flag, and on such a step every subgroup rescales its O through its wg.s_tile (rows that
//     kept their max scale by 1);
//   O += P V from the staged V; barrier (the buffer is written again two steps on).
// The matrix offsets differ between the subgroups (Variant.perSubgroupMatrices); control
// flow is uniform: every subgroup runs every step of the workgroup.
//#include "lib/paged_kv.wgsl"

// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Slack of the running max: P = exp(S - max) <= e^8 (about 2981; f16 holds 65504).
const TAU: f32 = 8.0;
// Largest finite f16 (q is clamped into it before conversion).
const Q_LIMIT: f32 = 65504.0;
const ROWS: u32 = 16u;
const KW: u32 = 16u;
// keys of a step each invocation of a row pair scores
const KH: u32 = KW / 2u;
const HD4: u32 = HD / 4u;
const THREADS: u32 = 32u * QSG;
// f16 rows padded by 16 bytes (a matrix load's rows start on distinct banks)
const QS: u32 = HD + 8u;
const PS: u32 = KW + 8u;
const SS: u32 = KW;
// a step's staged rows: KW of K, then KW of V; the vec4 words each invocation moves a step
const KVR: u32 = 2u * KW;
const NW: u32 = KVR * HD4 / THREADS;
// rows of wg.kv: the subgroups' query rows first, then two buffers of a step's K and V
const QR: u32 = max(QSG * ROWS, 2u * KVR);
const_assert HD == 128u;
const_assert QSG == 2u || QSG == 4u;
const_assert NW * THREADS == KVR * HD4;

// One workgroup struct (see paged_attention_tc.wgsl: separate workgroup variables read wrong
// values beside subgroup-matrix stores on the H200's driver).
struct Wg {
  // [row][d]: each subgroup's q * scale (rows 16 g ..); later two buffers of [key][d]: a
  // step's K (KW rows) then its V (KW rows)
  kv: array<f16, QR * QS>,
  // per subgroup [row][key]: S; [row][16 dims]: O slices
  s_tile: array<f32, QSG * ROWS * SS>,
  // per subgroup [row][key]: probabilities
  p_tile: array<f16, QSG * ROWS * PS>,
  // "some row rescales": step t sets flags[t % 2] and clears the other one for step t + 1
  flags: array<atomic<u32>, 2>,
}
var<workgroup> wg: Wg;

// Word w (of NW) of invocation lid for the step at key kb: its row of wg.kv's step layout
// (K rows 0 .. KW - 1, V rows KW ..) and its vec4 of that row.
fn word_row(lid: u32, w: u32) -> u32 {
  return (lid + THREADS * w) / HD4;
}

// The cache word of staged row r (a K or a V row) of the step at key kb: zeros past the
// context (a stale slot must not meet a zero probability as Inf or NaN).
fn cache_word(seq: u32, kvh: u32, kb: u32, r: u32, c: u32, context_len: u32) -> vec4<f16> {
  let key = kb + r % KW;
  if (key >= context_len) {
    return vec4<f16>(0.0);
  }
  let at = paged_kv_base(seq, key, kvh) + c;
  if (r < KW) {
    return k_cache[at];
  }
  return v_cache[at];
}

@compute @workgroup_size(THREADS)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let seq = wid.y;
  let kvh = wid.z;
  let sg = lid / 32u;
  let ln = lid % 32u;
  let group = params.num_q_heads / params.num_kv_heads;
  let tq = ROWS / group;
  let query_start = u32(seq_info[seq * 3u]);
  let query_len = u32(seq_info[seq * 3u + 1u]);
  let context_len = u32(seq_info[seq * 3u + 2u]);
  // Last blocks first: causal blocks grow with their index.
  let n_tiles = (params.max_query_len + tq - 1u) / tq;
  let block = (n_tiles + QSG - 1u) / QSG - 1u - wid.x;
  let w0 = block * QSG * tq;
  if (w0 >= query_len) {
    return;
  }
  // the keys the workgroup's last token sees
  let kv_end = context_len - query_len + w0 + min(QSG * tq, query_len - w0);
  // this subgroup's tile (none past the sequence: padding rows, never written)
  let t0 = w0 + sg * tq;
  var n_rows = 0u;
  if (t0 < query_len) {
    n_rows = min(tq, query_len - t0) * group;
  }
  let first_pos = context_len - query_len + t0;
  let first_token = query_start + t0;

  // the subgroup's rows of wg.kv = q * scale of its rows as f16, zeros past n_rows
  for (var e = ln; e < ROWS * HD4; e += 32u) {
    let r = e / HD4;
    let c = e % HD4;
    var v = vec4<f32>(0.0);
    if (r < n_rows) {
      let token = first_token + r / group;
      let head = kvh * group + r % group;
      v = q[(token * params.num_q_heads + head) * HD4 + c] * params.scale;
    }
    let h = vec4<f16>(clamp(v, vec4<f32>(-Q_LIMIT), vec4<f32>(Q_LIMIT)));
    let at = (sg * ROWS + r) * QS + 4u * c;
    wg.kv[at] = h.x;
    wg.kv[at + 1u] = h.y;
    wg.kv[at + 2u] = h.z;
    wg.kv[at + 3u] = h.w;
  }
  if (lid == 0u) {
    atomicStore(&wg.flags[0], 0u);
    atomicStore(&wg.flags[1], 0u);
  }
  workgroupBarrier();
  let qx = sg * ROWS * QS;
  let q0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.kv, qx, QS);
  let q1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.kv, qx + 16u, QS);
  let q2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.kv, qx + 32u, QS);
  let q3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.kv, qx + 48u, QS);
  let q4 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.kv, qx + 64u, QS);
  let q5 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.kv, qx + 80u, QS);
  let q6 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.kv, qx + 96u, QS);
  let q7 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.kv, qx + 112u, QS);
  // wg.kv takes the staged steps now: every load above comes first
  workgroupBarrier();
  // step 0 into buffer 0, step 1's words loaded
  var words = array<vec4<f16>, NW>();
  for (var w = 0u; w < NW; w++) {
    let r = word_row(lid, w);
    let c = (lid + THREADS * w) % HD4;
    put4(r * QS + 4u * c, cache_word(seq, kvh, 0u, r, c, context_len));
    words[w] = cache_word(seq, kvh, KW, r, c, context_len);
  }
  workgroupBarrier();

  // Invocations 2 row and 2 row + 1 of the subgroup: row `row`, keys half * KH .. of a step.
  let row = ln / 2u;
  let half = ln % 2u;
  // the last key the row may see (a padding row sees the workgroup's keys, with q = 0)
  var lim = kv_end - 1u;
  if (row < n_rows) {
    lim = first_pos + row / group;
  }
  let sx = sg * ROWS * SS;
  let px = sg * ROWS * PS;
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
  let n_steps = (kv_end + KW - 1u) / KW;

  for (var t = 0u; t < n_steps; t++) {
    let kb = t * KW;
    let kx = (t % 2u) * KVR * QS;
    let vx = kx + KW * QS;
    // S = Q K^T (scale folded into q)
    var s = subgroup_matrix_result<f32, 16, 16>();
    s = subgroupMatrixMultiplyAccumulate(q0, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.kv, kx, QS), s);
    s = subgroupMatrixMultiplyAccumulate(q1, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.kv, kx + 16u, QS), s);
    s = subgroupMatrixMultiplyAccumulate(q2, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.kv, kx + 32u, QS), s);
    s = subgroupMatrixMultiplyAccumulate(q3, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.kv, kx + 48u, QS), s);
    s = subgroupMatrixMultiplyAccumulate(q4, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.kv, kx + 64u, QS), s);
    s = subgroupMatrixMultiplyAccumulate(q5, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.kv, kx + 80u, QS), s);
    s = subgroupMatrixMultiplyAccumulate(q6, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.kv, kx + 96u, QS), s);
    s = subgroupMatrixMultiplyAccumulate(q7, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.kv, kx + 112u, QS), s);
    subgroupMatrixStore<row_major>(&wg.s_tile, sx, s, SS);
    // the next step into the other buffer (read two steps ago, before the last barrier) and
    // the words of the step after (past the keys: zeros, never read)
    let nx = ((t + 1u) % 2u) * KVR * QS;
    for (var w = 0u; w < NW; w++) {
      let r = word_row(lid, w);
      let c = (lid + THREADS * w) % HD4;
      put4(nx + r * QS + 4u * c, words[w]);
      words[w] = cache_word(seq, kvh, kb + 2u * KW, r, c, context_len);
    }
    workgroupBarrier();

    // Row `row`'s softmax step over this invocation's half of the keys.
    var mt = NEG;
    for (var j = 0u; j < KH; j++) {
      let key = half * KH + j;
      if (kb + key <= lim) {
        mt = max(mt, wg.s_tile[sx + row * SS + key]);
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
        p = exp(wg.s_tile[sx + row * SS + key] - m_run);
      }
      let ph = f16(p);
      wg.p_tile[px + row * PS + key] = ph;
      l_run += f32(ph);
    }
    if (lid == 0u) {
      atomicStore(&wg.flags[(t + 1u) % 2u], 0u);
    }
    let rescale = workgroupUniformLoad(&wg.flags[t % 2u]);
    if (rescale != 0u) {
      o0 = rescaled(o0, sx, row, half, alpha);
      o1 = rescaled(o1, sx, row, half, alpha);
      o2 = rescaled(o2, sx, row, half, alpha);
      o3 = rescaled(o3, sx, row, half, alpha);
      o4 = rescaled(o4, sx, row, half, alpha);
      o5 = rescaled(o5, sx, row, half, alpha);
      o6 = rescaled(o6, sx, row, half, alpha);
      o7 = rescaled(o7, sx, row, half, alpha);
    }

    // O += P V
    let p = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.p_tile, px, PS);
    o0 = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.kv, vx, QS), o0);
    o1 = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.kv, vx + 16u, QS), o1);
    o2 = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.kv, vx + 32u, QS), o2);
    o3 = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.kv, vx + 48u, QS), o3);
    o4 = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.kv, vx + 64u, QS), o4);
    o5 = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.kv, vx + 80u, QS), o5);
    o6 = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.kv, vx + 96u, QS), o6);
    o7 = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.kv, vx + 112u, QS), o7);
    // this step's buffer is written again during step t + 1, its S and P tiles in step t + 1
    workgroupBarrier();
  }

  // out = O / l for the query rows, 16 dims at a time through the subgroup's wg.s_tile
  let l = l_run + subgroupShuffleXor(l_run, 1u);
  let inv = select(0.0, 1.0 / l, l > 0.0);
  let token = first_token + row / group;
  let head = kvh * group + row % group;
  let out_at = (token * params.num_q_heads + head) * HD4 + 2u * half;
  write_o(o0, sx, row, half, n_rows, out_at, 0u, inv);
  write_o(o1, sx, row, half, n_rows, out_at, 1u, inv);
  write_o(o2, sx, row, half, n_rows, out_at, 2u, inv);
  write_o(o3, sx, row, half, n_rows, out_at, 3u, inv);
  write_o(o4, sx, row, half, n_rows, out_at, 4u, inv);
  write_o(o5, sx, row, half, n_rows, out_at, 5u, inv);
  write_o(o6, sx, row, half, n_rows, out_at, 6u, inv);
  write_o(o7, sx, row, half, n_rows, out_at, 7u, inv);
}

// Stores the 4 f16 of word v into wg.kv from `at`.
fn put4(at: u32, v: vec4<f16>) {
  wg.kv[at] = v.x;
  wg.kv[at + 1u] = v.y;
  wg.kv[at + 2u] = v.z;
  wg.kv[at + 3u] = v.w;
}

// O slice o with each of the subgroup's rows times its alpha, through its wg.s_tile (at sx).
// Every subgroup calls it in the same order (its barriers need uniform control flow).
fn rescaled(
  o: subgroup_matrix_result<f32, 16, 16>,
  sx: u32,
  row: u32,
  half: u32,
  alpha: f32,
) -> subgroup_matrix_result<f32, 16, 16> {
  subgroupMatrixStore<row_major>(&wg.s_tile, sx, o, SS);
  workgroupBarrier();
  let at = sx + row * SS + 8u * half;
  for (var c = 0u; c < 8u; c++) {
    wg.s_tile[at + c] *= alpha;
  }
  workgroupBarrier();
  let r = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, sx, SS);
  workgroupBarrier();
  return r;
}

// Writes this invocation's 8 of a row's 16 dims of O slice d (o, through the subgroup's
// wg.s_tile at sx), times inv, for the query rows. Every subgroup calls it in the same order.
fn write_o(
  o: subgroup_matrix_result<f32, 16, 16>,
  sx: u32,
  row: u32,
  half: u32,
  n_rows: u32,
  out_at: u32,
  d: u32,
  inv: f32,
) {
  subgroupMatrixStore<row_major>(&wg.s_tile, sx, o, SS);
  workgroupBarrier();
  if (row < n_rows) {
    let at = sx + row * SS + 8u * half;
    let a = vec4<f32>(wg.s_tile[at], wg.s_tile[at + 1u], wg.s_tile[at + 2u], wg.s_tile[at + 3u]);
    let b = vec4<f32>(wg.s_tile[at + 4u], wg.s_tile[at + 5u], wg.s_tile[at + 6u], wg.s_tile[at + 7u]);
    out[out_at + 4u * d] = a * inv;
    out[out_at + 4u * d + 1u] = b * inv;
  }
  workgroupBarrier();
}
