// c[m, n] (+)= sum_k a[m, k] * b[n, k] on f16 subgroup matrices with f32 accumulation, for
// prefill-sized row counts: the operands staged through workgroup memory, double-buffered, by
// a workgroup of WM x WN subgroups of 32. The workgroup owns TM = 64 WM rows x CW = 64 WN
// columns of c; subgroup (sm, sn) owns the 64 x 64 at rows 64 sm, columns 64 sn of it as
// 4 x 4 tiles of 16 (gemm_tc's reuse: 8 matrix loads feed 16 products), its matrices loaded
// from workgroup memory, which the H200 loads 28-55x faster than the same matrices straight
// from storage (probe-sgmat, 2026-12-01). Each step of BK of k, every invocation stages the
// 16-byte words (8 f16) of a and b it loaded during the previous step into the buffer the
// previous step did not read, issues the loads of the step after, and then runs this step's
// products from the other buffer: one barrier a step, and a step's memory latency hides behind
// the previous step's products (PF = 2, the lab `p2` forms: two register sets, each word loaded
// two steps before it is staged, so its latency hides behind two steps' products). The matrix
// offsets differ between the subgroups of a workgroup: the variant turns off Tint's
// subgroup-matrix uniformity check (Variant.perSubgroupMatrices); control flow stays uniform.
// Grid (the staged forms'): x the row blocks, y the column blocks, z the splits; with several
// splits workgroup z sums its k_split of the reduction into slice z of c ([splits, m, n], no
// accumulate). A row block that passes m goes through workgroup memory, masked; columns past
// n (n a multiple of 16) read b's last row and are not stored.
// Requires: subgroups of exactly 32 laid out as consecutive invocations; k and k_split
// multiples of BK; n a multiple of 16; a the f16 copy of the activations with rows up to a
// multiple of TM (cast_f16 pads them with zeros; other writers of the operand leave them
// stale: rows past m are computed and not stored).
//#include "lib/stage_words.wgsl"

const KW: u32 = BK / 8u; // words of a row a step
const LD: u32 = BK + 8u; // row stride of the staged tiles (f16): 16-byte rows, no bank clash
const THREADS: u32 = 32u * WM * WN;
// words each invocation loads a step, of a and of b
const NA: u32 = TM * KW / THREADS;
const NB: u32 = CW * KW / THREADS;
const_assert BK == 16u || BK == 32u;
const_assert PF == 1u || PF == 2u;
const_assert TM == 64u * WM && CW == 64u * WN;
const_assert NA * THREADS == TM * KW && NB * THREADS == CW * KW;

// One workgroup struct (see paged_attention_tc.wgsl): two buffers of each operand, and a
// 16 x 16 f32 tile a subgroup for the row block past m.
struct Wg {
  a: array<f16, 2u * TM * LD>,
  b: array<f16, 2u * CW * LD>,
  s: array<f32, 256u * WM * WN>,
}
var<workgroup> wg: Wg;

@compute @workgroup_size(THREADS)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let n = params.n;
  let k8 = params.k / 8u; // words a row
  let m0 = wid.x * TM;
  let n0 = wid.y * CW;
  let kb = wid.z * (params.k_split / 8u);
  let ke = min(kb + params.k_split / 8u, k8);
  let sg = lid / 32u;
  let lane = lid % 32u;
  // this subgroup's 64 x 64 of the workgroup's tile
  let sr = (sg % WM) * 64u;
  let sc = (sg / WM) * 64u;
  // word q = lid + THREADS i of a step: row q / KW, word q % KW; where it is read and staged
  var a_at = array<u32, NA>();
  var a_st = array<u32, NA>();
  for (var i = 0u; i < NA; i++) {
    let q = lid + THREADS * i;
    a_at[i] = (m0 + q / KW) * k8 + q % KW;
    a_st[i] = (q / KW) * LD + 8u * (q % KW);
  }
  var b_at = array<u32, NB>();
  var b_st = array<u32, NB>();
  for (var i = 0u; i < NB; i++) {
    let q = lid + THREADS * i;
    b_at[i] = min(n0 + q / KW, n - 1u) * k8 + q % KW;
    b_st[i] = (q / KW) * LD + 8u * (q % KW);
  }
  var av = array<vec4<u32>, NA>();
  var bv = array<vec4<u32>, NB>();
  // the first step staged into buffer 0, the second's words loaded
  for (var i = 0u; i < NA; i++) {
    put8a(a_st[i], a[a_at[i] + kb]);
  }
  for (var i = 0u; i < NB; i++) {
    put8b(b_st[i], b[b_at[i] + kb]);
  }
  // (PF = 2: the second step's words in the second set, the third step's in the first)
  var av1 = array<vec4<u32>, NA>();
  var bv1 = array<vec4<u32>, NB>();
  let s1 = min(kb + KW, ke - KW);
  if (PF == 2u) {
    for (var i = 0u; i < NA; i++) {
      av1[i] = a[a_at[i] + s1];
    }
    for (var i = 0u; i < NB; i++) {
      bv1[i] = b[b_at[i] + s1];
    }
  }
  let s1p = min(kb + PF * KW, ke - KW);
  for (var i = 0u; i < NA; i++) {
    av[i] = a[a_at[i] + s1p];
  }
  for (var i = 0u; i < NB; i++) {
    bv[i] = b[b_at[i] + s1p];
  }
  // every row of this block is a row of c (else: through wg.s, masked)
  let full = m0 + TM <= params.m;
  let slice = wid.z * params.m * n;
  var acc00 = subgroup_matrix_result<f32, 16, 16>();
  var acc01 = subgroup_matrix_result<f32, 16, 16>();
  var acc02 = subgroup_matrix_result<f32, 16, 16>();
  var acc03 = subgroup_matrix_result<f32, 16, 16>();
  var acc10 = subgroup_matrix_result<f32, 16, 16>();
  var acc11 = subgroup_matrix_result<f32, 16, 16>();
  var acc12 = subgroup_matrix_result<f32, 16, 16>();
  var acc13 = subgroup_matrix_result<f32, 16, 16>();
  var acc20 = subgroup_matrix_result<f32, 16, 16>();
  var acc21 = subgroup_matrix_result<f32, 16, 16>();
  var acc22 = subgroup_matrix_result<f32, 16, 16>();
  var acc23 = subgroup_matrix_result<f32, 16, 16>();
  var acc30 = subgroup_matrix_result<f32, 16, 16>();
  var acc31 = subgroup_matrix_result<f32, 16, 16>();
  var acc32 = subgroup_matrix_result<f32, 16, 16>();
  var acc33 = subgroup_matrix_result<f32, 16, 16>();
  if (params.accumulate != 0u) {
    let r = m0 + sr;
    let col = n0 + sc;
    acc00 = c_tile(full, sg, lane, slice, r, col);
    acc01 = c_tile(full, sg, lane, slice, r, col + 16u);
    acc02 = c_tile(full, sg, lane, slice, r, col + 32u);
    acc03 = c_tile(full, sg, lane, slice, r, col + 48u);
    acc10 = c_tile(full, sg, lane, slice, r + 16u, col);
    acc11 = c_tile(full, sg, lane, slice, r + 16u, col + 16u);
    acc12 = c_tile(full, sg, lane, slice, r + 16u, col + 32u);
    acc13 = c_tile(full, sg, lane, slice, r + 16u, col + 48u);
    acc20 = c_tile(full, sg, lane, slice, r + 32u, col);
    acc21 = c_tile(full, sg, lane, slice, r + 32u, col + 16u);
    acc22 = c_tile(full, sg, lane, slice, r + 32u, col + 32u);
    acc23 = c_tile(full, sg, lane, slice, r + 32u, col + 48u);
    acc30 = c_tile(full, sg, lane, slice, r + 48u, col);
    acc31 = c_tile(full, sg, lane, slice, r + 48u, col + 16u);
    acc32 = c_tile(full, sg, lane, slice, r + 48u, col + 32u);
    acc33 = c_tile(full, sg, lane, slice, r + 48u, col + 48u);
  }
  workgroupBarrier();
  var buf = 0u;
  for (var s = kb; s < ke; s += KW) {
    // stage the next step into the other buffer (the previous step read it before the last
    // barrier) and load the words of the step after (the last ones load themselves again:
    // in cache, never used)
    if (s + KW < ke) {
      let ao = (1u - buf) * TM * LD;
      let bo = (1u - buf) * CW * LD;
      let s2 = min(s + (PF + 1u) * KW, ke - KW);
      // (PF = 2: the set that holds the next step's words, by the step's parity)
      if (PF == 1u || ((s - kb) / KW) % 2u == 1u) {
        for (var i = 0u; i < NA; i++) {
          put8a(ao + a_st[i], av[i]);
        }
        for (var i = 0u; i < NB; i++) {
          put8b(bo + b_st[i], bv[i]);
        }
        for (var i = 0u; i < NA; i++) {
          av[i] = a[a_at[i] + s2];
        }
        for (var i = 0u; i < NB; i++) {
          bv[i] = b[b_at[i] + s2];
        }
      } else {
        for (var i = 0u; i < NA; i++) {
          put8a(ao + a_st[i], av1[i]);
        }
        for (var i = 0u; i < NB; i++) {
          put8b(bo + b_st[i], bv1[i]);
        }
        for (var i = 0u; i < NA; i++) {
          av1[i] = a[a_at[i] + s2];
        }
        for (var i = 0u; i < NB; i++) {
          bv1[i] = b[b_at[i] + s2];
        }
      }
    }
    // this step's products: 16 of k at a time
    let xa = (buf * TM + sr) * LD;
    let xb = (buf * CW + sc) * LD;
    var p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb, LD);
    var p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u * LD, LD);
    var p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 32u * LD, LD);
    var p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 48u * LD, LD);
    var x0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa, LD);
    var x1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 16u * LD, LD);
    var x2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 32u * LD, LD);
    var x3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 48u * LD, LD);
    acc00 = subgroupMatrixMultiplyAccumulate(x0, p0, acc00);
    acc01 = subgroupMatrixMultiplyAccumulate(x0, p1, acc01);
    acc02 = subgroupMatrixMultiplyAccumulate(x0, p2, acc02);
    acc03 = subgroupMatrixMultiplyAccumulate(x0, p3, acc03);
    acc10 = subgroupMatrixMultiplyAccumulate(x1, p0, acc10);
    acc11 = subgroupMatrixMultiplyAccumulate(x1, p1, acc11);
    acc12 = subgroupMatrixMultiplyAccumulate(x1, p2, acc12);
    acc13 = subgroupMatrixMultiplyAccumulate(x1, p3, acc13);
    acc20 = subgroupMatrixMultiplyAccumulate(x2, p0, acc20);
    acc21 = subgroupMatrixMultiplyAccumulate(x2, p1, acc21);
    acc22 = subgroupMatrixMultiplyAccumulate(x2, p2, acc22);
    acc23 = subgroupMatrixMultiplyAccumulate(x2, p3, acc23);
    acc30 = subgroupMatrixMultiplyAccumulate(x3, p0, acc30);
    acc31 = subgroupMatrixMultiplyAccumulate(x3, p1, acc31);
    acc32 = subgroupMatrixMultiplyAccumulate(x3, p2, acc32);
    acc33 = subgroupMatrixMultiplyAccumulate(x3, p3, acc33);
    if (BK > 16u) {
      // the second 16 of k (Tint checks the constant offsets of this branch even where BK
      // is 16: they stay inside the buffers)
      p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u, LD);
      p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u * LD + 16u, LD);
      p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 32u * LD + 16u, LD);
      p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 48u * LD + 16u, LD);
      x0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 16u, LD);
      x1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 16u * LD + 16u, LD);
      x2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 32u * LD + 16u, LD);
      x3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 48u * LD + 16u, LD);
      acc00 = subgroupMatrixMultiplyAccumulate(x0, p0, acc00);
      acc01 = subgroupMatrixMultiplyAccumulate(x0, p1, acc01);
      acc02 = subgroupMatrixMultiplyAccumulate(x0, p2, acc02);
      acc03 = subgroupMatrixMultiplyAccumulate(x0, p3, acc03);
      acc10 = subgroupMatrixMultiplyAccumulate(x1, p0, acc10);
      acc11 = subgroupMatrixMultiplyAccumulate(x1, p1, acc11);
      acc12 = subgroupMatrixMultiplyAccumulate(x1, p2, acc12);
      acc13 = subgroupMatrixMultiplyAccumulate(x1, p3, acc13);
      acc20 = subgroupMatrixMultiplyAccumulate(x2, p0, acc20);
      acc21 = subgroupMatrixMultiplyAccumulate(x2, p1, acc21);
      acc22 = subgroupMatrixMultiplyAccumulate(x2, p2, acc22);
      acc23 = subgroupMatrixMultiplyAccumulate(x2, p3, acc23);
      acc30 = subgroupMatrixMultiplyAccumulate(x3, p0, acc30);
      acc31 = subgroupMatrixMultiplyAccumulate(x3, p1, acc31);
      acc32 = subgroupMatrixMultiplyAccumulate(x3, p2, acc32);
      acc33 = subgroupMatrixMultiplyAccumulate(x3, p3, acc33);
    }
    workgroupBarrier();
    buf = 1u - buf;
  }
  let r = m0 + sr;
  let col = n0 + sc;
  put_tile(acc00, full, sg, lane, slice, r, col);
  put_tile(acc01, full, sg, lane, slice, r, col + 16u);
  put_tile(acc02, full, sg, lane, slice, r, col + 32u);
  put_tile(acc03, full, sg, lane, slice, r, col + 48u);
  put_tile(acc10, full, sg, lane, slice, r + 16u, col);
  put_tile(acc11, full, sg, lane, slice, r + 16u, col + 16u);
  put_tile(acc12, full, sg, lane, slice, r + 16u, col + 32u);
  put_tile(acc13, full, sg, lane, slice, r + 16u, col + 48u);
  put_tile(acc20, full, sg, lane, slice, r + 32u, col);
  put_tile(acc21, full, sg, lane, slice, r + 32u, col + 16u);
  put_tile(acc22, full, sg, lane, slice, r + 32u, col + 32u);
  put_tile(acc23, full, sg, lane, slice, r + 32u, col + 48u);
  put_tile(acc30, full, sg, lane, slice, r + 48u, col);
  put_tile(acc31, full, sg, lane, slice, r + 48u, col + 16u);
  put_tile(acc32, full, sg, lane, slice, r + 48u, col + 32u);
  put_tile(acc33, full, sg, lane, slice, r + 48u, col + 48u);
}

// The 16 x 16 of c (split slice `slice`) at row r0, column c0 as an accumulator: straight
// from c in a full row block, else through the subgroup's tile of wg.s, zero past m or n.
// Every subgroup calls it in the same order (its barriers need uniform control flow).
fn c_tile(
  full: bool,
  sg: u32,
  lane: u32,
  slice: u32,
  r0: u32,
  c0: u32,
) -> subgroup_matrix_result<f32, 16, 16> {
  let n = params.n;
  if (full) {
    var t = subgroup_matrix_result<f32, 16, 16>();
    if (c0 < n) {
      t = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, slice + r0 * n + c0, n);
    }
    return t;
  }
  for (var e = lane; e < 256u; e += 32u) {
    let r = r0 + e / 16u;
    let col = c0 + e % 16u;
    var v = 0.0;
    if (r < params.m && col < n) {
      v = c[slice + r * n + col];
    }
    wg.s[sg * 256u + e] = v;
  }
  workgroupBarrier();
  let t = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s, sg * 256u, 16u);
  workgroupBarrier();
  return t;
}

// Stores the accumulator of c's 16 x 16 at row r0, column c0 (split slice `slice`): straight
// into c in a full row block, else through the subgroup's tile of wg.s, the rows below m only.
// Every subgroup calls it in the same order (its barriers need uniform control flow).
fn put_tile(
  t: subgroup_matrix_result<f32, 16, 16>,
  full: bool,
  sg: u32,
  lane: u32,
  slice: u32,
  r0: u32,
  c0: u32,
) {
  let n = params.n;
  if (full) {
    if (c0 < n) {
      subgroupMatrixStore<row_major>(&c, slice + r0 * n + c0, t, n);
    }
    return;
  }
  subgroupMatrixStore<row_major>(&wg.s, sg * 256u, t, 16u);
  workgroupBarrier();
  for (var e = lane; e < 256u; e += 32u) {
    let r = r0 + e / 16u;
    let col = c0 + e % 16u;
    if (r < params.m && col < n) {
      c[slice + r * n + col] = wg.s[sg * 256u + e];
    }
  }
  workgroupBarrier();
}
