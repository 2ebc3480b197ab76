// c[m, n] (+)= sum_k a[m, k] * b[n, k] on subgroup matrices (tensor cores). One workgroup
// is one subgroup of 32 (NVIDIA's size), so every subgroup-matrix offset is
// workgroup-uniform, as Tint's uniformity analysis requires (the form the MoE GEMMs proved
// on the H200). A workgroup owns a 32-row x 64-column tile as 2 x 4 16x16 f32
// accumulators; a (f32) is staged to f16 in workgroup memory, b (T = f16, [n, k]) is staged
// as-is and read column-major as the right matrix; edges are zero-padded on load and
// masked on store through a workgroup tile, so any m, n and k work.
var<workgroup> a_tile: array<f16, 1024>; // [32 rows][BK=32]
var<workgroup> b_tile: array<f16, 2048>; // [64 columns][BK=32]
var<workgroup> c_tile: array<f32, 2048>; // [32 rows][64 columns]

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let m0 = wid.y * 32u;
  let n0 = wid.x * 64u;
  var acc00 = subgroup_matrix_result<f32, 16, 16>();
  var acc01 = subgroup_matrix_result<f32, 16, 16>();
  var acc02 = subgroup_matrix_result<f32, 16, 16>();
  var acc03 = subgroup_matrix_result<f32, 16, 16>();
  var acc10 = subgroup_matrix_result<f32, 16, 16>();
  var acc11 = subgroup_matrix_result<f32, 16, 16>();
  var acc12 = subgroup_matrix_result<f32, 16, 16>();
  var acc13 = subgroup_matrix_result<f32, 16, 16>();
  for (var k0 = 0u; k0 < params.k; k0 += 32u) {
    for (var q = 0u; q < 32u; q++) {
      let e = lid + q * 32u;
      let r = e / 32u;
      let kk = e % 32u;
      var av = 0.0;
      if (m0 + r < params.m && k0 + kk < params.k) {
        av = a[(m0 + r) * params.k + k0 + kk];
      }
      a_tile[e] = f16(av);
    }
    for (var q = 0u; q < 64u; q++) {
      let e = lid + q * 32u;
      let r = e / 32u;
      let kk = e % 32u;
      var bv = T(0.0);
      if (n0 + r < params.n && k0 + kk < params.k) {
        bv = b[(n0 + r) * params.k + k0 + kk];
      }
      b_tile[e] = f16(bv);
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 32u; kk += 16u) {
      let l0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a_tile, kk, 32u);
      let l1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a_tile, 16u * 32u + kk, 32u);
      let b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b_tile, kk, 32u);
      let b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b_tile, 16u * 32u + kk, 32u);
      let b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b_tile, 32u * 32u + kk, 32u);
      let b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b_tile, 48u * 32u + kk, 32u);
      acc00 = subgroupMatrixMultiplyAccumulate(l0, b0, acc00);
      acc01 = subgroupMatrixMultiplyAccumulate(l0, b1, acc01);
      acc02 = subgroupMatrixMultiplyAccumulate(l0, b2, acc02);
      acc03 = subgroupMatrixMultiplyAccumulate(l0, b3, acc03);
      acc10 = subgroupMatrixMultiplyAccumulate(l1, b0, acc10);
      acc11 = subgroupMatrixMultiplyAccumulate(l1, b1, acc11);
      acc12 = subgroupMatrixMultiplyAccumulate(l1, b2, acc12);
      acc13 = subgroupMatrixMultiplyAccumulate(l1, b3, acc13);
    }
    workgroupBarrier();
  }
  subgroupMatrixStore<row_major>(&c_tile, 0u, acc00, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 16u, acc01, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 32u, acc02, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 48u, acc03, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 16u * 64u, acc10, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 16u * 64u + 16u, acc11, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 16u * 64u + 32u, acc12, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 16u * 64u + 48u, acc13, 64u);
  workgroupBarrier();
  for (var i = lid; i < 2048u; i += 32u) {
    let r = m0 + i / 64u;
    let col = n0 + i % 64u;
    if (r < params.m && col < params.n) {
      let at = r * params.n + col;
      c[at] = select(c_tile[i], c[at] + c_tile[i], params.accumulate != 0u);
    }
  }
}
