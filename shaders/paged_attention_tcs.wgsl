// Paged causal attention on f16 subgroup matrices with K and V staged through workgroup
// memory as 16-byte words: the f16-tcs variant of paged_attention_tc (same params, bindings
// as 16-byte words (Variant.wideWords), grid, masking, lazy-max softmax and output as f16-tc,
// see paged_attention_tc.wgsl and kernels/paged_attention_tc.ts). f16-tc loads each 16-key
// tile of K^T and V straight from the paged cache as subgroup matrices, which on the H200
// cost an SM 28-55x what loads from workgroup memory do (probe-sgmat). Workgroup (q tile, seq,
// kv head), RT subgroups of 32 (f16-tcs: one; f16-tcs2, f16-tcs4: 2, 4), ROWS = 16 RT query
// rows, subgroup r taking rows 16 r .. 16 r + 15; q * scale goes through wg.a once into 8 left
// matrices held in each subgroup's registers. The subgroups of a workgroup share each step's
// staged K and V: the words a step stores per query row, the kernel's main cost on the H200,
// drop with RT. Per step of 16 keys (all RT subgroups; a subgroup's own S, P and O):
//   the step's K words (loaded during the previous step: 8 a lane, two keys a load
//     instruction, zero words for keys at or past the tile's last visible key, so a stale
//     slot never meets a zero probability as Inf or NaN) go to wg.a as [key][d] f16 rows;
//     barrier; the next step's K words are loaded;
//   S = Q K^T (K^T from wg.a) to wg.s_tile; barrier; the step's V words go to wg.a over K and
//     the next step's V words are loaded; each row's softmax step in two invocations as in
//     f16-tc; P to wg.b; barrier; if any row rescaled, O through wg.s_tile; O += P V (V from
//     wg.a).
// With Q16 = 1 (the -q16 twins) q * scale comes as f16 words from q16 (qk_norm_rope_cache
// writes it so: the same f16 values, half the bytes) and is staged as it is.
// At the end O goes through wg.s_tile 16 columns at a time, each row divided by l, into `out`
// (f32), or with O16 = 1 (the `-o16` twins) into `out16` as f16 clamped to its finite range
// (the o projection's tensor-core operand, which a cast_f16 dispatch would write otherwise).
// One buffer for q, K and V keeps the workgroup memory at f16-tc's 6,152 bytes with one
// subgroup: its workgroup memory bounds how many an SM holds (the form with a buffer each,
// 15 KB, was no faster than f16-tc on the H200; decode's f16-tcdw gained 25% from the same two
// steps). The buffer holds 16 rows of 136 f16 (a step's keys) whatever RT is: q goes through it
// in RT passes of 128 / RT dims (rows of 128 / RT f16 when RT > 1), each pass's matrices loaded
// before the next is staged, so f16-tcs2 takes 7,944 bytes (6 workgroups an SM of the H200's 48
// KB, where a 32-row q buffer's 12,296 bytes fit 3) and f16-tcs4 11,528 (4, against 1).
// A rescale step (some row of the workgroup took a new max) rescales every subgroup's O.
// With several subgroups the matrix offsets differ between them (Variant.perSubgroupMatrices).
// Needs head_dim 128 and block_size a multiple of 16 (a step's keys inside one block).
//#include "lib/paged_kv.wgsl"
//#include "lib/stage_words.wgsl"
//#include "lib/attention_steps_tc.wgsl"
//#include "lib/clamp_f16.wgsl"

// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Slack of the running max: P = exp(S - max) <= e^8 (about 2981; f16 holds 65504).
const TAU: f32 = 8.0;
// Largest finite f16 (q is clamped into it before conversion).
const Q_LIMIT: f32 = 65504.0;
const ROWS: u32 = 16u * RT;
const THREADS: u32 = 32u * RT;
// the workgroup loads and stages a step's K and V words (lib/attention_steps_tc.wgsl)
const KV_LANES: u32 = THREADS;
const KW: u32 = 16u;
// keys of a step each invocation of a row pair scores
const KH: u32 = KW / 2u;
const ND: u32 = HD / 16u;
// f16 rows padded by 16 bytes (a matrix load's rows start on distinct banks)
const QS: u32 = HD + 8u;
// dims of q a staging pass takes, its matrices, and its rows' stride in wg.a: padded with one
// subgroup (16 rows of QS), unpadded with more (RT x 16 rows of 128 / RT: the padding would
// not fit, and the rows are loaded once a workgroup)
const DP: u32 = HD / RT;
const NDP: u32 = DP / 16u;
const QP: u32 = DP + 8u * (1u / RT);
const PS: u32 = KW + 8u;
const SS: u32 = KW;
const_assert KT == 1u;
const_assert RT == 1u || RT == 2u || RT == 4u;
const_assert HD == 128u && ND == 8u;

// The workgroup memory is one struct (see paged_attention_tc.wgsl).
struct Wg {
  // [row][d of a pass]: q * scale, RT passes before the first step; then [key][d]: a step's
  // K, then its V (put8a of lib/stage_words.wgsl)
  a: array<f16, 16u * QS>,
  // [row][key]: probabilities (named b for lib/stage_words.wgsl, whose put8b this shader does
  // not call)
  b: array<f16, ROWS * PS>,
  // [row][key]: S; [row][16 dims]: O slices
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

// Subgroup sg's left matrix of Q, dims 16 d .., as its staging pass (d / NDP) left it in wg.a;
// K^T's right matrix of dims 16 d .. from wg.a, V's right matrix of dims 16 d .. from wg.a.
fn q_mat(sg: u32, d: u32) -> subgroup_matrix_left<f16, 16, 16> {
  return subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, (sg % RT) * 16u * QP + (d % NDP) * 16u, QP);
}

fn kt_mat(d: u32) -> subgroup_matrix_right<f16, 16, 16> {
  return subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, q_at(d), QS);
}

fn v_mat(d: u32) -> subgroup_matrix_right<f16, 16, 16> {
  return subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, q_at(d), QS);
}

@compute @workgroup_size(THREADS)
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
  let kv_words = params.num_kv_heads * (HD / 8u);

  // the first step's words go out before q is staged
  var k_words = load_words(seq, kvh, 0u, kv_end, kv_words, lid, false);
  var v_words = load_words(seq, kvh, 0u, kv_end, kv_words, lid, true);

  if (lid == 0u) {
    atomicStore(&wg.flags[0], 0u);
    atomicStore(&wg.flags[1], 0u);
  }
  // q * scale of the tile's rows as f16 (zeros past n_rows) in RT passes of DP dims through
  // wg.a, [row][QP]; each pass's left matrices loaded before the next pass is staged
  let sg = lid / 32u;
  let dp4 = DP / 4u;
  var q0 = subgroup_matrix_left<f16, 16, 16>();
  var q1 = subgroup_matrix_left<f16, 16, 16>();
  var q2 = subgroup_matrix_left<f16, 16, 16>();
  var q3 = subgroup_matrix_left<f16, 16, 16>();
  var q4 = subgroup_matrix_left<f16, 16, 16>();
  var q5 = subgroup_matrix_left<f16, 16, 16>();
  var q6 = subgroup_matrix_left<f16, 16, 16>();
  var q7 = subgroup_matrix_left<f16, 16, 16>();
  for (var p = 0u; p < RT; p++) {
    // (the previous pass's matrix loads are done)
    if (p > 0u) {
      workgroupBarrier();
    }
    if (Q16 != 0u) {
      // q * scale in f16 already (qk_norm_rope_cache's q16): 16-byte words of 8 values
      let dp8 = DP / 8u;
      let hd8 = HD / 8u;
      for (var e = lid; e < ROWS * dp8; e += THREADS) {
        let r = e / dp8;
        let c = e % dp8;
        var w = vec4<u32>(0u);
        if (r < n_rows) {
          let token = first_token + r / group;
          let head = kvh * group + r % group;
          w = q16[(token * params.num_q_heads + head) * hd8 + p * dp8 + c];
        }
        put8a(r * QP + 8u * c, w);
      }
    } else {
      for (var e = lid; e < ROWS * dp4; e += THREADS) {
        let r = e / dp4;
        let c = e % dp4;
        var v = vec4<f32>(0.0);
        if (r < n_rows) {
          let token = first_token + r / group;
          let head = kvh * group + r % group;
          v = q[(token * params.num_q_heads + head) * hd4 + p * dp4 + c] * params.scale;
        }
        let h = vec4<f16>(clamp(v, vec4<f32>(-Q_LIMIT), vec4<f32>(Q_LIMIT)));
        let at = r * QP + 4u * c;
        wg.a[at] = h.x;
        wg.a[at + 1u] = h.y;
        wg.a[at + 2u] = h.z;
        wg.a[at + 3u] = h.w;
      }
    }
    workgroupBarrier();
    if (0u / NDP == p) { q0 = q_mat(sg, 0u); }
    if (1u / NDP == p) { q1 = q_mat(sg, 1u); }
    if (2u / NDP == p) { q2 = q_mat(sg, 2u); }
    if (3u / NDP == p) { q3 = q_mat(sg, 3u); }
    if (4u / NDP == p) { q4 = q_mat(sg, 4u); }
    if (5u / NDP == p) { q5 = q_mat(sg, 5u); }
    if (6u / NDP == p) { q6 = q_mat(sg, 6u); }
    if (7u / NDP == p) { q7 = q_mat(sg, 7u); }
  }
  // (the last pass's loads are done before the first step's K store: its barrier)

  // Invocations 2 row and 2 row + 1 of subgroup sg: its row `row` (tile row `tr`), keys
  // half * KH .. of each step. The subgroup's 16 rows of wg.s_tile and wg.b start at s_at, p_at.
  let row = (lid % 32u) / 2u;
  let half = lid % 2u;
  let tr = sg * 16u + row;
  let s_at = sg * 16u * SS;
  let p_at = sg * 16u * PS;
  // the last key the row may see (a padding row sees the tile's keys, with q = 0)
  var lim = kv_end - 1u;
  if (tr < n_rows) {
    lim = first_pos + tr / group;
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
    // the next step's first key (the last step loads its own again: in cache, never stored)
    let kn = min(kb + KW, (n_steps - 1u) * KW);
    // the previous step's V loads from wg.a are done (and, before the first, q's)
    workgroupBarrier();
    store_words(k_words, lid);
    workgroupBarrier();
    k_words = load_words(seq, kvh, kn, kv_end, kv_words, lid, false);

    // S = Q K^T (scale folded into q)
    var s0 = subgroup_matrix_result<f32, 16, 16>();
    s0 = subgroupMatrixMultiplyAccumulate(q0, kt_mat(0u), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q1, kt_mat(1u), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q2, kt_mat(2u), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q3, kt_mat(3u), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q4, kt_mat(4u), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q5, kt_mat(5u), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q6, kt_mat(6u), s0);
    s0 = subgroupMatrixMultiplyAccumulate(q7, kt_mat(7u), s0);
    subgroupMatrixStore<row_major>(&wg.s_tile, s_at, s0, SS);
    // (the K loads above are done: V takes wg.a, visible after the barrier before P V)
    workgroupBarrier();
    store_words(v_words, lid);
    v_words = load_words(seq, kvh, kn, kv_end, kv_words, lid, true);

    // Row `row`'s softmax step over this invocation's half of the keys.
    var mt = NEG;
    for (var j = 0u; j < KH; j++) {
      let key = half * KH + j;
      if (kb + key <= lim) {
        mt = max(mt, wg.s_tile[s_at + row * SS + key]);
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
        p = exp(wg.s_tile[s_at + row * SS + key] - m_run);
      }
      let ph = f16(p);
      wg.b[p_at + row * PS + key] = ph;
      l_run += f32(ph);
    }
    if (lid == 0u) {
      atomicStore(&wg.flags[(t + 1u) % 2u], 0u);
    }
    // (its barrier also makes P in wg.b and V in wg.a visible to the matrix loads below)
    let rescale = workgroupUniformLoad(&wg.flags[t % 2u]);
    if (rescale != 0u) {
      o0 = rescaled(o0, s_at, row, half, alpha);
      o1 = rescaled(o1, s_at, row, half, alpha);
      o2 = rescaled(o2, s_at, row, half, alpha);
      o3 = rescaled(o3, s_at, row, half, alpha);
      o4 = rescaled(o4, s_at, row, half, alpha);
      o5 = rescaled(o5, s_at, row, half, alpha);
      o6 = rescaled(o6, s_at, row, half, alpha);
      o7 = rescaled(o7, s_at, row, half, alpha);
    }

    // O += P V
    let pa = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.b, p_at, PS);
    o0 = subgroupMatrixMultiplyAccumulate(pa, v_mat(0u), o0);
    o1 = subgroupMatrixMultiplyAccumulate(pa, v_mat(1u), o1);
    o2 = subgroupMatrixMultiplyAccumulate(pa, v_mat(2u), o2);
    o3 = subgroupMatrixMultiplyAccumulate(pa, v_mat(3u), o3);
    o4 = subgroupMatrixMultiplyAccumulate(pa, v_mat(4u), o4);
    o5 = subgroupMatrixMultiplyAccumulate(pa, v_mat(5u), o5);
    o6 = subgroupMatrixMultiplyAccumulate(pa, v_mat(6u), o6);
    o7 = subgroupMatrixMultiplyAccumulate(pa, v_mat(7u), o7);
    // wg.a, wg.b and wg.s_tile are written again in the next step only after its barriers
  }

  // out = O / l for the query rows, 16 dims at a time through wg.s_tile
  let l = l_run + subgroupShuffleXor(l_run, 1u);
  let inv = select(0.0, 1.0 / l, l > 0.0);
  let token = first_token + tr / group;
  let head = kvh * group + tr % group;
  let out_at = (token * params.num_q_heads + head) * hd4 + 2u * half;
  let live = tr < n_rows;
  write_o(o0, s_at, row, half, live, out_at, 0u, inv);
  write_o(o1, s_at, row, half, live, out_at, 1u, inv);
  write_o(o2, s_at, row, half, live, out_at, 2u, inv);
  write_o(o3, s_at, row, half, live, out_at, 3u, inv);
  write_o(o4, s_at, row, half, live, out_at, 4u, inv);
  write_o(o5, s_at, row, half, live, out_at, 5u, inv);
  write_o(o6, s_at, row, half, live, out_at, 6u, inv);
  write_o(o7, s_at, row, half, live, out_at, 7u, inv);
}

// Writes O slice d (`o`) of the subgroup's rows, times inv, for a live row (lib's
// o_slice_dims: call it from uniform control flow).
fn write_o(
  o: subgroup_matrix_result<f32, 16, 16>,
  s_at: u32,
  row: u32,
  half: u32,
  live: bool,
  out_at: u32,
  d: u32,
  inv: f32,
) {
  let v = o_slice_dims(o, s_at, row, half, inv);
  if (live) {
    if (O16 != 0u) {
      out16[out_at + 4u * d] = vec4<f16>(clamp_f16(v[0]));
      out16[out_at + 4u * d + 1u] = vec4<f16>(clamp_f16(v[1]));
    } else {
      out[out_at + 4u * d] = v[0];
      out[out_at + 4u * d + 1u] = v[1];
    }
  }
}
