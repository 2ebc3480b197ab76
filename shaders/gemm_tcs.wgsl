// c[m, n] (+)= sum_k a[m, k] * b[n, k] on f16 subgroup matrices (tensor cores) with f32
// accumulation, the operands staged through workgroup memory: the invocations read a and b as
// 16-byte words (declared vec4<u32>, 8 f16 a word: Variant.wideWords), write them to
// workgroup memory, and the matrices load from there. For decode-sized row counts, where
// gemm_tc's matrix loads straight from storage move the weights at a fraction of the HBM rate.
// One workgroup is one subgroup of 32 (matrix offsets stay workgroup-uniform) and owns MT
// tiles of 16 rows x 64 columns: rows m0 .. m0 + 16 MT, columns n0 .. n0 + 64. Each step covers
// BK = 32 of k, and the next step's words are loaded before this step's products; past k_end
// the staged words are zeros. Split-K as gemm_tc: workgroup z sums its k_split (a multiple of
// 16) and, with several splits, writes slice z of c. The sums go through workgroup memory: only
// rows below m and columns below n are stored, added to c when accumulate.
// Requires: n and k multiples of 16; a is the f16 copy of the activations with its rows padded
// with zeros to a multiple of 16 MT (cast_f16). Columns past n read b's last row.

const BK: u32 = 32u; // k a step
const LD: u32 = 40u; // row stride of the staged tiles (f16; 16-byte aligned rows, padded)

// One workgroup struct (see paged_attention_tc.wgsl).
struct Wg {
  b: array<f16, 64u * 40u>, // 64 rows of b x BK
  a: array<f16, 64u * 40u>, // 16 MT rows of a x BK (the rows past 16 MT unused)
  s: array<f32, 64u * 64u>, // the sums [16 MT rows][64 columns]
}
var<workgroup> wg: Wg;

// Part p (0..3) of v, without a dynamic vector index (which the H200's compiler turned into
// local memory: gate_up 15.3 -> 45.8 ms a step at 64 x 1024).
fn part(v: vec4<u32>, p: u32) -> u32 {
  return select(select(v.x, v.y, p == 1u), select(v.z, v.w, p == 3u), p >= 2u);
}

// Writes part p of v (two f16) to wg.b at at + 2 p.
fn put2b(at: u32, v: vec4<u32>, p: u32) {
  let h = bitcast<vec2<f16>>(part(v, p));
  wg.b[at + 2u * p] = h.x;
  wg.b[at + 2u * p + 1u] = h.y;
}

fn put2a(at: u32, v: vec4<u32>, p: u32) {
  let h = bitcast<vec2<f16>>(part(v, p));
  wg.a[at + 2u * p] = h.x;
  wg.a[at + 2u * p + 1u] = h.y;
}

// Writes the 8 f16 of word v to wg.b (put8a: wg.a) from offset at. With ROT its four parts go
// in the order rot, rot + 1, ... (mod 4): the lanes whose rows start in the same bank group
// have distinct rot, so a store instruction's lanes hit distinct banks.
fn put8b(at: u32, v: vec4<u32>, rot: u32) {
  let r = select(0u, rot, ROT != 0u);
  put2b(at, v, r & 3u);
  put2b(at, v, (r + 1u) & 3u);
  put2b(at, v, (r + 2u) & 3u);
  put2b(at, v, (r + 3u) & 3u);
}

fn put8a(at: u32, v: vec4<u32>, rot: u32) {
  let r = select(0u, rot, ROT != 0u);
  put2a(at, v, r & 3u);
  put2a(at, v, (r + 1u) & 3u);
  put2a(at, v, (r + 2u) & 3u);
  put2a(at, v, (r + 3u) & 3u);
}

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let m0 = wid.y * 16u * MT;
  let n0 = wid.x * 64u;
  let n = params.n;
  let k8 = params.k / 8u; // words a row
  let kb = wid.z * params.k_split / 8u;
  let ke = min(kb + params.k_split / 8u, k8);
  let lr = lid / 4u; // the row of 8 a load covers
  let lk = lid % 4u; // its word in the step's BK
  // row starts (in words) of this lane's loads; a word index past k reads the last word
  // (never used: the staged value is zero there)
  var b_at = array<u32, 8>();
  for (var i = 0u; i < 8u; i++) {
    b_at[i] = min(n0 + 8u * i + lr, n - 1u) * k8;
  }
  var a_at = array<u32, 8>();
  for (var i = 0u; i < 2u * MT; i++) {
    a_at[i] = (m0 + 8u * i + lr) * k8;
  }
  var bv = array<vec4<u32>, 8>();
  var av = array<vec4<u32>, 8>();
  let zero = vec4<u32>(0u);
  let w0 = min(kb + lk, k8 - 1u);
  for (var i = 0u; i < 8u; i++) {
    bv[i] = select(zero, b[b_at[i] + w0], kb + lk < ke);
  }
  for (var i = 0u; i < 2u * MT; i++) {
    av[i] = select(zero, a[a_at[i] + w0], kb + lk < ke);
  }
  var c00 = subgroup_matrix_result<f32, 16, 16>();
  var c01 = subgroup_matrix_result<f32, 16, 16>();
  var c02 = subgroup_matrix_result<f32, 16, 16>();
  var c03 = subgroup_matrix_result<f32, 16, 16>();
  var c10 = subgroup_matrix_result<f32, 16, 16>();
  var c11 = subgroup_matrix_result<f32, 16, 16>();
  var c12 = subgroup_matrix_result<f32, 16, 16>();
  var c13 = subgroup_matrix_result<f32, 16, 16>();
  var c20 = subgroup_matrix_result<f32, 16, 16>();
  var c21 = subgroup_matrix_result<f32, 16, 16>();
  var c22 = subgroup_matrix_result<f32, 16, 16>();
  var c23 = subgroup_matrix_result<f32, 16, 16>();
  var c30 = subgroup_matrix_result<f32, 16, 16>();
  var c31 = subgroup_matrix_result<f32, 16, 16>();
  var c32 = subgroup_matrix_result<f32, 16, 16>();
  var c33 = subgroup_matrix_result<f32, 16, 16>();
  for (var s = kb; s < ke; s += BK / 8u) {
    // the previous step's matrices are loaded: stage this step's words
    workgroupBarrier();
    for (var i = 0u; i < 8u; i++) {
      put8b((8u * i + lr) * LD + 8u * lk, bv[i], lk);
    }
    for (var i = 0u; i < 2u * MT; i++) {
      put8a((8u * i + lr) * LD + 8u * lk, av[i], lk);
    }
    workgroupBarrier();
    // the next step's words (zeros past this split's end)
    let wn = s + BK / 8u + lk;
    let in_k = wn < ke;
    let at = min(wn, k8 - 1u);
    for (var i = 0u; i < 8u; i++) {
      bv[i] = select(zero, b[b_at[i] + at], in_k);
    }
    for (var i = 0u; i < 2u * MT; i++) {
      av[i] = select(zero, a[a_at[i] + at], in_k);
    }
    for (var kk = 0u; kk < BK; kk += 16u) {
      let b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, kk, LD);
      let b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + kk, LD);
      let b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u * LD + kk, LD);
      let b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u * LD + kk, LD);
      let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, kk, LD);
      c00 = subgroupMatrixMultiplyAccumulate(a0, b0, c00);
      c01 = subgroupMatrixMultiplyAccumulate(a0, b1, c01);
      c02 = subgroupMatrixMultiplyAccumulate(a0, b2, c02);
      c03 = subgroupMatrixMultiplyAccumulate(a0, b3, c03);
      if (MT > 1u) {
        let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u * LD + kk, LD);
        c10 = subgroupMatrixMultiplyAccumulate(a1, b0, c10);
        c11 = subgroupMatrixMultiplyAccumulate(a1, b1, c11);
        c12 = subgroupMatrixMultiplyAccumulate(a1, b2, c12);
        c13 = subgroupMatrixMultiplyAccumulate(a1, b3, c13);
      }
      if (MT > 2u) {
        let a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 32u * LD + kk, LD);
        c20 = subgroupMatrixMultiplyAccumulate(a2, b0, c20);
        c21 = subgroupMatrixMultiplyAccumulate(a2, b1, c21);
        c22 = subgroupMatrixMultiplyAccumulate(a2, b2, c22);
        c23 = subgroupMatrixMultiplyAccumulate(a2, b3, c23);
      }
      if (MT > 3u) {
        let a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 48u * LD + kk, LD);
        c30 = subgroupMatrixMultiplyAccumulate(a3, b0, c30);
        c31 = subgroupMatrixMultiplyAccumulate(a3, b1, c31);
        c32 = subgroupMatrixMultiplyAccumulate(a3, b2, c32);
        c33 = subgroupMatrixMultiplyAccumulate(a3, b3, c33);
      }
    }
  }
  subgroupMatrixStore<row_major>(&wg.s, 0u, c00, 64u);
  subgroupMatrixStore<row_major>(&wg.s, 16u, c01, 64u);
  subgroupMatrixStore<row_major>(&wg.s, 32u, c02, 64u);
  subgroupMatrixStore<row_major>(&wg.s, 48u, c03, 64u);
  if (MT > 1u) {
    subgroupMatrixStore<row_major>(&wg.s, 1024u, c10, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 1040u, c11, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 1056u, c12, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 1072u, c13, 64u);
  }
  if (MT > 2u) {
    subgroupMatrixStore<row_major>(&wg.s, 2048u, c20, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 2064u, c21, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 2080u, c22, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 2096u, c23, 64u);
  }
  if (MT > 3u) {
    subgroupMatrixStore<row_major>(&wg.s, 3072u, c30, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 3088u, c31, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 3104u, c32, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 3120u, c33, 64u);
  }
  workgroupBarrier();
  // this split's slice of c (the only one without split-K)
  let c0 = wid.z * params.m * n;
  let acc_on = params.accumulate != 0u;
  for (var q = lid; q < 16u * MT * 64u; q += 32u) {
    let r = m0 + q / 64u;
    let col = n0 + q % 64u;
    if (r < params.m && col < n) {
      let at = c0 + r * n + col;
      c[at] = select(wg.s[q], c[at] + wg.s[q], acc_on);
    }
  }
}
