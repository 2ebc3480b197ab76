// c[m, n] (+)= sum_k a[m, k] * b[n, k] on f16 subgroup matrices with f32 accumulation, for
// decode-sized row counts: the staged tensor-core GEMM of gemm_tcs.wgsl with SEVERAL subgroups
// a workgroup. A workgroup of RT x CS subgroups of 32 owns CW = 32 CS columns of c and TM = 16
// RT rows; subgroup sg takes row tile sg % RT (rows m0 + 16 (sg % RT) ..) and column group
// sg / RT (columns n0 + 32 (sg / RT) ..), so the CW weight rows staged once a step feed all RT
// row tiles and the TM rows of a staged once feed all CS column groups; each subgroup holds
// only 2 accumulators (gemm_tcs's one subgroup holding RT row tiles left few resident on the
// H200). CS = 1 (f16-tcs32x2/64x4/128x8) suits weights of a few thousand rows; the column
// groups (`w<CW>` forms) suit the LM head's 151,936, where a staged a beside 32 weight rows
// doubled the stores a weight word costs. Every invocation loads 16-byte words of
// b and a (declared vec4<u32>, 8 f16 a word) for the next step of BK = 64 of k while this
// step's products run; they go to workgroup memory, and the matrices load from there. The
// matrix offsets differ between the subgroups of a workgroup: the variant turns off Tint's
// subgroup-matrix uniformity check (Variant.perSubgroupMatrices); control flow stays uniform
// and every subgroup runs every matrix operation. Grid and split-K as gemm_tcs: x the row
// blocks, y the column blocks (of CW), z the splits; with several splits workgroup z writes slice z
// of c ([splits, m, n]). Only rows below m and columns below n are stored (added to c when
// accumulate). Without accumulate a row tile wholly below m stores its sums straight to c, and
// only the tile that m cuts goes through a 16 x 32 tile of workgroup memory (a column group at
// a time); with accumulate every tile goes through it, a subgroup at a time, so each sum meets c's value in one f32 add
// (starting the products from c would round each step's sums to the residual's magnitude). On
// the H200 the sums of every tile through workgroup memory at once (TM x 32 f32: 8 KB at TM
// 64, against 2 KB now) left fewer workgroups an SM: in perf-linear, qkv at 64 rows took 44.8
// µs a layer in 2 splits against 26.4 stored straight, o 25.2 against 22.4 in 4 (2026-12-01,
// `session16_call5`).
// Requires: subgroups of exactly 32 laid out as consecutive invocations (subgroup r =
// invocations 32 r .. 32 r + 31); k and k_split multiples of 64; n a multiple of 16; a the f16
// copy of the activations (cast_f16) or, with A32, the f32 activations (lib/a_words.wgsl);
// rows past m read row m - 1. Columns past n read b's last row and are not stored.
//#include "lib/stage_words.wgsl"
//#include "lib/a_words.wgsl"

const BK: u32 = 64u; // k a step
const LD: u32 = 72u; // row stride of the staged tiles (f16; 16-byte aligned rows, padded)
const THREADS: u32 = 32u * RT * CS;
// rows of 8 words one pass of the workgroup's loads covers
const PASS_ROWS: u32 = THREADS / 8u;
// rows of a one pass covers (fewer than PASS_ROWS where TM is: then only the invocations of the
// first A_PASS_ROWS rows load a)
const A_PASS_ROWS: u32 = min(PASS_ROWS, TM);
// passes over the CW weight rows and over the TM rows of a
const NB: u32 = CW / PASS_ROWS;
const NA: u32 = TM / A_PASS_ROWS;
const_assert RT == 1u || RT == 2u || RT == 4u || RT == 8u;
const_assert CS == 1u || CS == 2u || CS == 4u || CS == 8u;
const_assert TM == 16u * RT && CW == 32u * CS;
const_assert NB * PASS_ROWS == CW && NA * A_PASS_ROWS == TM;

// One workgroup struct (see paged_attention_tc.wgsl).
struct Wg {
  b: array<f16, CW * 72u>, // CW weight rows x BK
  a: array<f16, TM * 72u>, // TM rows of a x BK
  s: array<f32, 16u * 32u>, // the sums of the row tile that m cuts [16 rows][32 columns]
}
var<workgroup> wg: Wg;

@compute @workgroup_size(THREADS)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let n = params.n;
  let k8 = params.k / 8u; // words a row
  // row blocks fastest: the blocks that read the same weights run side by side (L2)
  let m0 = wid.x * TM;
  let n0 = wid.y * CW;
  let kb = wid.z * (params.k_split / 8u);
  let ke = min(kb + params.k_split / 8u, k8);
  let sg = lid / 32u;
  let rt = sg % RT; // this subgroup's row tile
  let cg = sg / RT; // and its column group
  let nc = n0 + 32u * cg; // its first column
  let lr = lid / 8u; // the row a load covers (of PASS_ROWS a pass)
  let lk = lid % 8u; // its word in the step's BK
  var b_at = array<u32, NB>();
  for (var i = 0u; i < NB; i++) {
    b_at[i] = min(n0 + PASS_ROWS * i + lr, n - 1u) * k8 + lk;
  }
  var a_at = array<u32, NA>();
  for (var i = 0u; i < NA; i++) {
    a_at[i] = a_row(m0 + A_PASS_ROWS * i + min(lr, A_PASS_ROWS - 1u)) * k8 + lk;
  }
  var bv = array<vec4<u32>, NB>();
  var av = array<AWord, NA>();
  for (var i = 0u; i < NB; i++) {
    bv[i] = b[b_at[i] + kb];
  }
  for (var i = 0u; i < NA; i++) {
    av[i] = a_load(a_at[i] + kb);
  }
  // this subgroup's row tile in wg.a, its column group's weight rows in wg.b
  let xa = rt * 16u * LD;
  let xb = cg * 32u * LD;
  var c0 = subgroup_matrix_result<f32, 16, 16>();
  var c1 = subgroup_matrix_result<f32, 16, 16>();
  for (var s = kb; s < ke; s += BK / 8u) {
    // the previous step's matrices are loaded: stage this step's words
    workgroupBarrier();
    for (var i = 0u; i < NB; i++) {
      put8b((PASS_ROWS * i + lr) * LD + 8u * lk, bv[i]);
    }
    if (lr < A_PASS_ROWS) {
      for (var i = 0u; i < NA; i++) {
        put8a((A_PASS_ROWS * i + lr) * LD + 8u * lk, a_halves(av[i]));
      }
    }
    workgroupBarrier();
    // the next step's words (the last step loads itself again: in cache, never used)
    let sn = min(s + BK / 8u, ke - BK / 8u);
    for (var i = 0u; i < NB; i++) {
      bv[i] = b[b_at[i] + sn];
    }
    for (var i = 0u; i < NA; i++) {
      av[i] = a_load(a_at[i] + sn);
    }
    let p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb, LD);
    let q0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u * LD, LD);
    let x0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa, LD);
    c0 = subgroupMatrixMultiplyAccumulate(x0, p0, c0);
    c1 = subgroupMatrixMultiplyAccumulate(x0, q0, c1);
    let p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u, LD);
    let q1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u * LD + 16u, LD);
    let x1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 16u, LD);
    c0 = subgroupMatrixMultiplyAccumulate(x1, p1, c0);
    c1 = subgroupMatrixMultiplyAccumulate(x1, q1, c1);
    let p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 32u, LD);
    let q2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u * LD + 32u, LD);
    let x2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 32u, LD);
    c0 = subgroupMatrixMultiplyAccumulate(x2, p2, c0);
    c1 = subgroupMatrixMultiplyAccumulate(x2, q2, c1);
    let p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 48u, LD);
    let q3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u * LD + 48u, LD);
    let x3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 48u, LD);
    c0 = subgroupMatrixMultiplyAccumulate(x3, p3, c0);
    c1 = subgroupMatrixMultiplyAccumulate(x3, q3, c1);
  }
  // this subgroup's row tile of this split's slice of c (rows below m only)
  let slice = wid.z * params.m * n;
  let r_tile = m0 + 16u * rt;
  if (params.accumulate != 0u) {
    // a subgroup at a time through wg.s, each sum added to c's value once
    for (var i = 0u; i < RT * CS; i++) {
      let ti = m0 + 16u * (i % RT);
      let ci = n0 + 32u * (i / RT);
      if (sg == i && ti < params.m) {
        subgroupMatrixStore<row_major>(&wg.s, 0u, c0, 32u);
        subgroupMatrixStore<row_major>(&wg.s, 16u, c1, 32u);
      }
      workgroupBarrier();
      if (ti < params.m && ci < n) {
        add_rows(slice, ti, min(16u, params.m - ti), ci, n, lid, true);
      }
      workgroupBarrier();
    }
    return;
  }
  // a tile wholly below m (the same in the whole subgroup) straight to c
  let tile_at = slice + r_tile * n + nc;
  if (r_tile + 16u <= params.m) {
    if (nc < n) {
      subgroupMatrixStore<row_major>(&c, tile_at, c0, n);
    }
    if (nc + 16u < n) {
      subgroupMatrixStore<row_major>(&c, tile_at + 16u, c1, n);
    }
  }
  // the tile that m cuts (at most one row tile a workgroup) through wg.s, a column group at a
  // time (the condition is the same in the whole workgroup)
  let cut = params.m % 16u;
  let cut_tile = params.m - cut;
  if (cut != 0u && cut_tile >= m0 && cut_tile < m0 + TM) {
    for (var g = 0u; g < CS; g++) {
      if (r_tile == cut_tile && cg == g) {
        subgroupMatrixStore<row_major>(&wg.s, 0u, c0, 32u);
        subgroupMatrixStore<row_major>(&wg.s, 16u, c1, 32u);
      }
      workgroupBarrier();
      if (n0 + 32u * g < n) {
        add_rows(slice, cut_tile, cut, n0 + 32u * g, n, lid, false);
      }
      workgroupBarrier();
    }
  }
}

// Rows row0 .. row0 + rows - 1 of the 16 x 32 sums in wg.s into c (added to c's values when
// `add`), columns n0 .. below n, by every invocation of the workgroup.
fn add_rows(slice: u32, row0: u32, rows: u32, n0: u32, n: u32, lid: u32, add: bool) {
  for (var q = lid; q < rows * 32u; q += THREADS) {
    let col = n0 + q % 32u;
    if (col < n) {
      let at = slice + (row0 + q / 32u) * n + col;
      c[at] = select(wg.s[q], c[at] + wg.s[q], add);
    }
  }
}
