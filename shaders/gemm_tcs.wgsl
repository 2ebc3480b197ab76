// c[m, n] (+)= sum_k a[m, k] * b[n, k] on f16 subgroup matrices (tensor cores) with f32
// accumulation, for decode-sized row counts (up to 128), where the layer is weight bound:
// gemm_tc's matrices loaded straight from storage moved the weights of Qwen3-30B-A3B's qkv
// and o projections at about 230 GB/s on the H200 (64 rows). Here the weights are read once
// a workgroup, as the MoE decode forms read theirs (moe_gemm_*_tcs.wgsl): the invocations
// load a and b as 16-byte words (declared vec4<u32>, 8 f16 a word), write them to workgroup
// memory, and the matrices load from there. One workgroup (one subgroup of 32: matrix offsets
// stay workgroup-uniform) owns CW = 32 columns of c (32 weight rows, read in 128-byte runs: BK
// = 64 of k a step) and RT row tiles of 16 (rows m0 .. m0 + TM, TM = 16 RT), so each weight
// word staged feeds RT products; the next step's words are loaded before this step's
// products. Grid: x the row blocks, y the column blocks, z the splits. Split-K as gemm_tc: workgroup z sums its k_split and, with several splits, writes
// slice z of c ([splits, m, n]). A row tile's sums go through workgroup memory; only rows
// below m and columns below n are stored (added to c when accumulate).
// Requires: k and k_split multiples of 64 (gemmTcParams with the variant), n of 16; a is the
// f16 copy of the activations (cast_f16) or, with A32, the f32 activations
// (lib/a_words.wgsl); rows past m read row m - 1. Columns past n read b's last row and are not
// stored.
//#include "lib/stage_words.wgsl"
//#include "lib/a_words.wgsl"

const BK: u32 = 64u; // k a step
const LD: u32 = 72u; // row stride of the staged tiles (f16; 16-byte aligned rows, padded)

// One workgroup struct (see paged_attention_tc.wgsl).
struct Wg {
  b: array<f16, 32u * 72u>, // 32 weight rows x BK
  a: array<f16, RT * 16u * 72u>, // TM rows of a x BK
  s: array<f32, 16u * 32u>, // one row tile's sums [16 rows][32 columns]
}
var<workgroup> wg: Wg;

// Offset in wg.a of row tile r, k slice t (a function: Tint checks constant offsets against
// the array even in the branches a smaller RT never takes; r % RT keeps it inside).
fn a_tile(r: u32, t: u32) -> u32 {
  return (r % RT) * 16u * LD + 16u * t;
}

// Writes the row tile in wg.s (rows r0 .. r0 + 16, columns n0 .. n0 + 32) to c at `slice`.
fn flush(r0: u32, n0: u32, slice: u32, lid: u32) {
  workgroupBarrier();
  let n = params.n;
  let acc_on = params.accumulate != 0u;
  for (var q = lid; q < 512u; q += 32u) {
    let r = r0 + q / 32u;
    let col = n0 + q % 32u;
    if (r < params.m && col < n) {
      let at = slice + r * n + col;
      c[at] = select(wg.s[q], c[at] + wg.s[q], acc_on);
    }
  }
  // the next row tile's sums wait until every lane has read these
  workgroupBarrier();
}

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let n = params.n;
  let k8 = params.k / 8u; // words a row
  // row blocks fastest: the blocks that read the same weights run side by side (L2)
  let m0 = wid.x * TM;
  let n0 = wid.y * 32u;
  let kb = wid.z * (params.k_split / 8u);
  let ke = min(kb + params.k_split / 8u, k8);
  let lr = lid / 8u; // the row of 4 a load covers
  let lk = lid % 8u; // its word in the step's BK
  var b_at = array<u32, 8>();
  for (var i = 0u; i < 8u; i++) {
    b_at[i] = min(n0 + 4u * i + lr, n - 1u) * k8 + lk;
  }
  var a_at = array<u32, 4u * RT>();
  for (var i = 0u; i < 4u * RT; i++) {
    a_at[i] = a_row(m0 + 4u * i + lr) * k8 + lk;
  }
  var bv = array<vec4<u32>, 8>();
  var av = array<AWord, 4u * RT>();
  for (var i = 0u; i < 8u; i++) {
    bv[i] = b[b_at[i] + kb];
  }
  for (var i = 0u; i < 4u * RT; i++) {
    av[i] = a_load(a_at[i] + kb);
  }
  // c<row tile><column tile>
  var c00 = subgroup_matrix_result<f32, 16, 16>();
  var c01 = subgroup_matrix_result<f32, 16, 16>();
  var c10 = subgroup_matrix_result<f32, 16, 16>();
  var c11 = subgroup_matrix_result<f32, 16, 16>();
  var c20 = subgroup_matrix_result<f32, 16, 16>();
  var c21 = subgroup_matrix_result<f32, 16, 16>();
  var c30 = subgroup_matrix_result<f32, 16, 16>();
  var c31 = subgroup_matrix_result<f32, 16, 16>();
  for (var s = kb; s < ke; s += BK / 8u) {
    // the previous step's matrices are loaded: stage this step's words
    workgroupBarrier();
    for (var i = 0u; i < 8u; i++) {
      put8b((4u * i + lr) * LD + 8u * lk, bv[i]);
    }
    for (var i = 0u; i < 4u * RT; i++) {
      put8a((4u * i + lr) * LD + 8u * lk, a_halves(av[i]));
    }
    workgroupBarrier();
    // the next step's words (the last step loads itself again: in cache, never used)
    let sn = min(s + BK / 8u, ke - BK / 8u);
    for (var i = 0u; i < 8u; i++) {
      bv[i] = b[b_at[i] + sn];
    }
    for (var i = 0u; i < 4u * RT; i++) {
      av[i] = a_load(a_at[i] + sn);
    }
    // k slice 0
    let p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
    let q0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD, LD);
    let x00 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(0u, 0u), LD);
    c00 = subgroupMatrixMultiplyAccumulate(x00, p0, c00);
    c01 = subgroupMatrixMultiplyAccumulate(x00, q0, c01);
    if (RT > 1u) {
      let x10 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(1u, 0u), LD);
      c10 = subgroupMatrixMultiplyAccumulate(x10, p0, c10);
      c11 = subgroupMatrixMultiplyAccumulate(x10, q0, c11);
    }
    if (RT > 2u) {
      let x20 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(2u, 0u), LD);
      c20 = subgroupMatrixMultiplyAccumulate(x20, p0, c20);
      c21 = subgroupMatrixMultiplyAccumulate(x20, q0, c21);
      let x30 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(3u, 0u), LD);
      c30 = subgroupMatrixMultiplyAccumulate(x30, p0, c30);
      c31 = subgroupMatrixMultiplyAccumulate(x30, q0, c31);
    }
    // k slice 1
    let p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
    let q1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
    let x01 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(0u, 1u), LD);
    c00 = subgroupMatrixMultiplyAccumulate(x01, p1, c00);
    c01 = subgroupMatrixMultiplyAccumulate(x01, q1, c01);
    if (RT > 1u) {
      let x11 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(1u, 1u), LD);
      c10 = subgroupMatrixMultiplyAccumulate(x11, p1, c10);
      c11 = subgroupMatrixMultiplyAccumulate(x11, q1, c11);
    }
    if (RT > 2u) {
      let x21 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(2u, 1u), LD);
      c20 = subgroupMatrixMultiplyAccumulate(x21, p1, c20);
      c21 = subgroupMatrixMultiplyAccumulate(x21, q1, c21);
      let x31 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(3u, 1u), LD);
      c30 = subgroupMatrixMultiplyAccumulate(x31, p1, c30);
      c31 = subgroupMatrixMultiplyAccumulate(x31, q1, c31);
    }
    // k slice 2
    let p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u, LD);
    let q2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 32u, LD);
    let x02 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(0u, 2u), LD);
    c00 = subgroupMatrixMultiplyAccumulate(x02, p2, c00);
    c01 = subgroupMatrixMultiplyAccumulate(x02, q2, c01);
    if (RT > 1u) {
      let x12 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(1u, 2u), LD);
      c10 = subgroupMatrixMultiplyAccumulate(x12, p2, c10);
      c11 = subgroupMatrixMultiplyAccumulate(x12, q2, c11);
    }
    if (RT > 2u) {
      let x22 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(2u, 2u), LD);
      c20 = subgroupMatrixMultiplyAccumulate(x22, p2, c20);
      c21 = subgroupMatrixMultiplyAccumulate(x22, q2, c21);
      let x32 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(3u, 2u), LD);
      c30 = subgroupMatrixMultiplyAccumulate(x32, p2, c30);
      c31 = subgroupMatrixMultiplyAccumulate(x32, q2, c31);
    }
    // k slice 3
    let p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u, LD);
    let q3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 48u, LD);
    let x03 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(0u, 3u), LD);
    c00 = subgroupMatrixMultiplyAccumulate(x03, p3, c00);
    c01 = subgroupMatrixMultiplyAccumulate(x03, q3, c01);
    if (RT > 1u) {
      let x13 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(1u, 3u), LD);
      c10 = subgroupMatrixMultiplyAccumulate(x13, p3, c10);
      c11 = subgroupMatrixMultiplyAccumulate(x13, q3, c11);
    }
    if (RT > 2u) {
      let x23 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(2u, 3u), LD);
      c20 = subgroupMatrixMultiplyAccumulate(x23, p3, c20);
      c21 = subgroupMatrixMultiplyAccumulate(x23, q3, c21);
      let x33 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, a_tile(3u, 3u), LD);
      c30 = subgroupMatrixMultiplyAccumulate(x33, p3, c30);
      c31 = subgroupMatrixMultiplyAccumulate(x33, q3, c31);
    }
  }
  // this split's slice of c (the only one without split-K)
  let slice = wid.z * params.m * n;
  subgroupMatrixStore<row_major>(&wg.s, 0u, c00, 32u);
  subgroupMatrixStore<row_major>(&wg.s, 16u, c01, 32u);
  flush(m0, n0, slice, lid);
  if (RT > 1u && m0 + 16u < params.m) {
    subgroupMatrixStore<row_major>(&wg.s, 0u, c10, 32u);
    subgroupMatrixStore<row_major>(&wg.s, 16u, c11, 32u);
    flush(m0 + 16u, n0, slice, lid);
  }
  if (RT > 2u && m0 + 32u < params.m) {
    subgroupMatrixStore<row_major>(&wg.s, 0u, c20, 32u);
    subgroupMatrixStore<row_major>(&wg.s, 16u, c21, 32u);
    flush(m0 + 32u, n0, slice, lid);
  }
  if (RT > 2u && m0 + 48u < params.m) {
    subgroupMatrixStore<row_major>(&wg.s, 0u, c30, 32u);
    subgroupMatrixStore<row_major>(&wg.s, 16u, c31, 32u);
    flush(m0 + 48u, n0, slice, lid);
  }
}
