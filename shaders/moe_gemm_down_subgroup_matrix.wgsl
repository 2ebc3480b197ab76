// Grouped down GEMM on subgroup matrices (tensor cores), prefill-shaped: one workgroup
// per (64 output columns, work item), 32-row x 64-column tiles. The workgroup is one
// subgroup of 32 (NVIDIA's size), so every subgroup-matrix offset is workgroup-uniform,
// as Tint's uniformity analysis requires; it holds 2 x 4 16x16 f32 accumulators. act rows
// (expert-sorted, read directly) are staged to f16 in workgroup memory; w (f16) is staged
// as-is and read column-major as the right matrix; the result is stored through a
// workgroup tile, masked. Rows beyond 32 in a work item loop.
var<workgroup> a_tile: array<f16, 1024>; // [32 rows][BK=32]
var<workgroup> b_tile: array<f16, 2048>; // [64 columns][BK=32]
var<workgroup> c_tile: array<f32, 2048>; // [32 rows][64 columns]

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let item = wid.y + wid.z * nwg.y;
  if (item >= min(work_items[0].x, params.max_items)) {
    return;
  }
  let info = work_items[1u + item];
  let e = info.x;
  let row_end = info.z;
  let hidden = params.hidden;
  let k4 = params.inter / 4u;
  let n0 = wid.x * 64u;
  for (var r0 = info.y; r0 < row_end; r0 += 32u) {
    var acc00 = subgroup_matrix_result<f32, 16, 16>();
    var acc01 = subgroup_matrix_result<f32, 16, 16>();
    var acc02 = subgroup_matrix_result<f32, 16, 16>();
    var acc03 = subgroup_matrix_result<f32, 16, 16>();
    var acc10 = subgroup_matrix_result<f32, 16, 16>();
    var acc11 = subgroup_matrix_result<f32, 16, 16>();
    var acc12 = subgroup_matrix_result<f32, 16, 16>();
    var acc13 = subgroup_matrix_result<f32, 16, 16>();
    for (var k0 = 0u; k0 < k4; k0 += 8u) {
      for (var q = 0u; q < 8u; q++) {
        let v = lid + q * 32u;
        let r = v / 8u;
        let kv = v % 8u;
        var av = vec4<f32>(0.0);
        if (r0 + r < row_end && k0 + kv < k4) {
          av = act[(r0 + r) * k4 + k0 + kv];
        }
        for (var c = 0u; c < 4u; c++) {
          a_tile[r * 32u + kv * 4u + c] = f16(av[c]);
        }
      }
      for (var q = 0u; q < 16u; q++) {
        let v = lid + q * 32u;
        let r = v / 8u;
        let kv = v % 8u;
        var bv = vec4<T>(T(0.0));
        if (n0 + r < hidden && k0 + kv < k4) {
          bv = w[(e * hidden + n0 + r) * k4 + k0 + kv];
        }
        for (var c = 0u; c < 4u; c++) {
          b_tile[r * 32u + kv * 4u + c] = f16(bv[c]);
        }
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
      let r = r0 + i / 64u;
      let col = n0 + i % 64u;
      if (r < row_end && col < hidden) {
        y[r * hidden + col] = c_tile[i];
      }
    }
    workgroupBarrier();
  }
}
