// c[m, n] (+)= sum_k a[m, k] * b[n, k] (+= when params.accumulate) on subgroup matrices (tensor cores): 64x64 tiles,
// 128 invocations = 4 subgroups of 32, each owning a 32x32 quarter as 2x2 16x16 f32
// accumulators. a (f32) is staged to f16 in workgroup memory, b (f16, [n, k]) is staged
// as-is and read column-major as the right matrix. Edges are zero-padded on load and
// masked on store through a workgroup tile, so any m, n and k (k % 2 == 0 not needed).
var<workgroup> a_tile: array<f16, 2048>; // [64 rows][BK=32]
var<workgroup> b_tile: array<f16, 2048>; // [64 cols][BK=32]
var<workgroup> c_tile: array<f32, 4096>; // [64][64]

@compute @workgroup_size(128)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
  let m0 = wid.y * 64u;
  let n0 = wid.x * 64u;
  let sg = lid / sg_size;
  let sr = (sg / 2u) * 32u;
  let sc = (sg % 2u) * 32u;
  var acc00: subgroup_matrix_result<f32, 16, 16>;
  var acc01: subgroup_matrix_result<f32, 16, 16>;
  var acc10: subgroup_matrix_result<f32, 16, 16>;
  var acc11: subgroup_matrix_result<f32, 16, 16>;
  for (var k0 = 0u; k0 < params.k; k0 += 32u) {
    for (var i = 0u; i < 16u; i++) {
      let e = lid + i * 128u;
      let r = e / 32u;
      let kk = e % 32u;
      var av = 0.0;
      if (m0 + r < params.m && k0 + kk < params.k) {
        av = a[(m0 + r) * params.k + k0 + kk];
      }
      a_tile[e] = f16(av);
      var bv = T(0.0);
      if (n0 + r < params.n && k0 + kk < params.k) {
        bv = b[(n0 + r) * params.k + k0 + kk];
      }
      b_tile[e] = f16(bv);
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 32u; kk += 16u) {
      let l0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a_tile, sr * 32u + kk, 32u);
      let l1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a_tile, (sr + 16u) * 32u + kk, 32u);
      let r0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b_tile, sc * 32u + kk, 32u);
      let r1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b_tile, (sc + 16u) * 32u + kk, 32u);
      acc00 = subgroupMatrixMultiplyAccumulate(l0, r0, acc00);
      acc01 = subgroupMatrixMultiplyAccumulate(l0, r1, acc01);
      acc10 = subgroupMatrixMultiplyAccumulate(l1, r0, acc10);
      acc11 = subgroupMatrixMultiplyAccumulate(l1, r1, acc11);
    }
    workgroupBarrier();
  }
  subgroupMatrixStore<row_major>(&c_tile, sr * 64u + sc, acc00, 64u);
  subgroupMatrixStore<row_major>(&c_tile, sr * 64u + sc + 16u, acc01, 64u);
  subgroupMatrixStore<row_major>(&c_tile, (sr + 16u) * 64u + sc, acc10, 64u);
  subgroupMatrixStore<row_major>(&c_tile, (sr + 16u) * 64u + sc + 16u, acc11, 64u);
  workgroupBarrier();
  for (var i = lid; i < 4096u; i += 128u) {
    let r = m0 + i / 64u;
    let col = n0 + i % 64u;
    if (r < params.m && col < params.n) {
      let at = r * params.n + col;
      c[at] = select(c_tile[i], c[at] + c_tile[i], params.accumulate != 0u);
    }
  }
}
