// c[m, n] (+)= sum_k a[m, k] * b[n, k] on f16 subgroup matrices (tensor cores) with f32
// accumulation, for decode-sized row counts: gemm_tc's 16-row tiles with both operands staged
// through workgroup memory, as the MoE decode forms stage theirs (moe_gemm_*_tcs.wgsl; the
// matrices' loads straight from storage move the weights at a fraction of the HBM rate). The
// invocations read a and b as 16-byte words (declared vec4<u32>, 8 f16 a word), write them to
// workgroup memory, and the matrices load from there. One workgroup (one subgroup of 32:
// matrix offsets stay workgroup-uniform) owns rows m0 .. m0 + 16 and columns n0 .. n0 + 64;
// each step covers BK = 32 of k (two 16-wide slices, written out) and the next step's words are
// loaded before this step's products; words past this split's end are staged as zeros. Split-K
// as gemm_tc: workgroup z sums its k_split (a multiple of 16) and, with several splits, writes
// slice z of c. The sums go through workgroup memory: only rows below m and columns below n are
// stored, added to c when accumulate.
// Requires: n and k multiples of 16; a is the f16 copy of the activations with its rows padded
// with zeros to a multiple of 16 (cast_f16). Columns past n read b's last row.
//#include "lib/stage_words.wgsl"

const BK: u32 = 32u; // k a step
const LD: u32 = 40u; // row stride of the staged tiles (f16; 16-byte aligned rows, padded)

// One workgroup struct (see paged_attention_tc.wgsl).
struct Wg {
  b: array<f16, 64u * 40u>, // 64 rows of b x BK
  a: array<f16, 16u * 40u>, // 16 rows of a x BK
  s: array<f32, 16u * 64u>, // the sums [16 rows][64 columns]
}
var<workgroup> wg: Wg;

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let m0 = wid.y * 16u;
  let n0 = wid.x * 64u;
  let n = params.n;
  let k8 = params.k / 8u; // words a row
  let kb = wid.z * (params.k_split / 8u);
  let ke = min(kb + params.k_split / 8u, k8);
  let lr = lid / 4u; // the row of 8 a load covers
  let lk = lid % 4u; // its word in the step's BK
  var b_at = array<u32, 8>();
  for (var i = 0u; i < 8u; i++) {
    b_at[i] = min(n0 + 8u * i + lr, n - 1u) * k8;
  }
  var a_at = array<u32, 2>();
  for (var i = 0u; i < 2u; i++) {
    a_at[i] = (m0 + 8u * i + lr) * k8;
  }
  let zero = vec4<u32>(0u);
  // this lane's first word (a word past k reads the last one: staged as zero)
  var wk = kb + lk;
  var bv = array<vec4<u32>, 8>();
  var av = array<vec4<u32>, 2>();
  for (var i = 0u; i < 8u; i++) {
    bv[i] = select(zero, b[b_at[i] + min(wk, k8 - 1u)], wk < ke);
  }
  for (var i = 0u; i < 2u; i++) {
    av[i] = select(zero, a[a_at[i] + min(wk, k8 - 1u)], wk < ke);
  }
  var c0 = subgroup_matrix_result<f32, 16, 16>();
  var c1 = subgroup_matrix_result<f32, 16, 16>();
  var c2 = subgroup_matrix_result<f32, 16, 16>();
  var c3 = subgroup_matrix_result<f32, 16, 16>();
  for (var s = kb; s < ke; s += BK / 8u) {
    // the previous step's matrices are loaded: stage this step's words
    workgroupBarrier();
    for (var i = 0u; i < 8u; i++) {
      put8b((8u * i + lr) * LD + 8u * lk, bv[i]);
    }
    for (var i = 0u; i < 2u; i++) {
      put8a((8u * i + lr) * LD + 8u * lk, av[i]);
    }
    workgroupBarrier();
    // the next step's words
    wk += BK / 8u;
    let at = min(wk, k8 - 1u);
    for (var i = 0u; i < 8u; i++) {
      bv[i] = select(zero, b[b_at[i] + at], wk < ke);
    }
    for (var i = 0u; i < 2u; i++) {
      av[i] = select(zero, a[a_at[i] + at], wk < ke);
    }
    let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, LD);
    let b00 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
    let b10 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD, LD);
    let b20 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u * LD, LD);
    let b30 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u * LD, LD);
    c0 = subgroupMatrixMultiplyAccumulate(a0, b00, c0);
    c1 = subgroupMatrixMultiplyAccumulate(a0, b10, c1);
    c2 = subgroupMatrixMultiplyAccumulate(a0, b20, c2);
    c3 = subgroupMatrixMultiplyAccumulate(a0, b30, c3);
    let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u, LD);
    let b01 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
    let b11 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
    let b21 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u * LD + 16u, LD);
    let b31 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u * LD + 16u, LD);
    c0 = subgroupMatrixMultiplyAccumulate(a1, b01, c0);
    c1 = subgroupMatrixMultiplyAccumulate(a1, b11, c1);
    c2 = subgroupMatrixMultiplyAccumulate(a1, b21, c2);
    c3 = subgroupMatrixMultiplyAccumulate(a1, b31, c3);
  }
  subgroupMatrixStore<row_major>(&wg.s, 0u, c0, 64u);
  subgroupMatrixStore<row_major>(&wg.s, 16u, c1, 64u);
  subgroupMatrixStore<row_major>(&wg.s, 32u, c2, 64u);
  subgroupMatrixStore<row_major>(&wg.s, 48u, c3, 64u);
  workgroupBarrier();
  // this split's slice of c (the only one without split-K)
  let slice = wid.z * params.m * n;
  let acc_on = params.accumulate != 0u;
  for (var q = lid; q < 16u * 64u; q += 32u) {
    let r = m0 + q / 64u;
    let col = n0 + q % 64u;
    if (r < params.m && col < n) {
      let at = slice + r * n + col;
      c[at] = select(wg.s[q], c[at] + wg.s[q], acc_on);
    }
  }
}
