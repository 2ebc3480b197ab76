// Grouped down GEMM of the MoE experts on f16 subgroup matrices (tensor cores): for the
// rows r of a work item (expert e), y[r, n] = act[r, :] . w[e, n, :] with act the f16
// activations moe_gemm_gate_up_tc wrote. One workgroup (one subgroup of 32) takes a work
// item's 64 rows x 64 output columns as 4 x 4 tiles of 16 x 16 (f32 accumulators), the
// operands loaded straight from memory, the next k slice's before the current slice's
// products. A full item (64 rows) stores its tiles straight into y; a shorter one through
// workgroup memory, masked. hidden must be a multiple of 64, inter of 16, items at most 64
// rows; act holds 64 rows past the last item (the gate/up GEMM's padding).
//#include "lib/moe_work_item.wgsl"
//#include "lib/expert_tiles.wgsl"

var<workgroup> c_tile: array<f32, 64u * 64u>; // [64 rows][64 columns]

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let it = moe_work_item(wid, nwg);
  if (it.x == NO_ITEM) {
    return;
  }
  let e = it.x;
  let r0 = it.y;
  let r_end = it.z;
  let hd = params.hidden;
  let inter = params.inter;
  let n0 = wid.x * 64u;
  let b_at = (e * hd + n0) * inter;
  // w's row stride in a 16 x 16 block (16 rows further on is 16 * inter further on either way)
  let ws = tile_stride(inter);
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
  let a0_at = (r0 + 0u) * inter;
  let a1_at = (r0 + 16u) * inter;
  let a2_at = (r0 + 32u) * inter;
  let a3_at = (r0 + 48u) * inter;
  var b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, b_at + 0u * inter + 0u, ws);
  var b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, b_at + 16u * inter + 0u, ws);
  var b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, b_at + 32u * inter + 0u, ws);
  var b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, b_at + 48u * inter + 0u, ws);
  var a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a0_at + 0u, inter);
  var a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a1_at + 0u, inter);
  var a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a2_at + 0u, inter);
  var a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a3_at + 0u, inter);
  for (var k0 = 0u; k0 < inter; k0 += 16u) {
    let cb0 = b0;
    let cb1 = b1;
    let cb2 = b2;
    let cb3 = b3;
    let ca0 = a0;
    let ca1 = a1;
    let ca2 = a2;
    let ca3 = a3;
    let kn = min(k0 + 16u, inter - 16u);
    b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, b_at + 0u * inter + tile_col(kn), ws);
    b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, b_at + 16u * inter + tile_col(kn), ws);
    b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, b_at + 32u * inter + tile_col(kn), ws);
    b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, b_at + 48u * inter + tile_col(kn), ws);
    a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a0_at + kn, inter);
    a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a1_at + kn, inter);
    a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a2_at + kn, inter);
    a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a3_at + kn, inter);
    acc00 = subgroupMatrixMultiplyAccumulate(ca0, cb0, acc00);
    acc01 = subgroupMatrixMultiplyAccumulate(ca0, cb1, acc01);
    acc02 = subgroupMatrixMultiplyAccumulate(ca0, cb2, acc02);
    acc03 = subgroupMatrixMultiplyAccumulate(ca0, cb3, acc03);
    acc10 = subgroupMatrixMultiplyAccumulate(ca1, cb0, acc10);
    acc11 = subgroupMatrixMultiplyAccumulate(ca1, cb1, acc11);
    acc12 = subgroupMatrixMultiplyAccumulate(ca1, cb2, acc12);
    acc13 = subgroupMatrixMultiplyAccumulate(ca1, cb3, acc13);
    acc20 = subgroupMatrixMultiplyAccumulate(ca2, cb0, acc20);
    acc21 = subgroupMatrixMultiplyAccumulate(ca2, cb1, acc21);
    acc22 = subgroupMatrixMultiplyAccumulate(ca2, cb2, acc22);
    acc23 = subgroupMatrixMultiplyAccumulate(ca2, cb3, acc23);
    acc30 = subgroupMatrixMultiplyAccumulate(ca3, cb0, acc30);
    acc31 = subgroupMatrixMultiplyAccumulate(ca3, cb1, acc31);
    acc32 = subgroupMatrixMultiplyAccumulate(ca3, cb2, acc32);
    acc33 = subgroupMatrixMultiplyAccumulate(ca3, cb3, acc33);
  }
  if (r_end - r0 == 64u) {
    subgroupMatrixStore<row_major>(&y, (r0 + 0u) * hd + n0 + 0u, acc00, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 0u) * hd + n0 + 16u, acc01, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 0u) * hd + n0 + 32u, acc02, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 0u) * hd + n0 + 48u, acc03, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 16u) * hd + n0 + 0u, acc10, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 16u) * hd + n0 + 16u, acc11, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 16u) * hd + n0 + 32u, acc12, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 16u) * hd + n0 + 48u, acc13, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 32u) * hd + n0 + 0u, acc20, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 32u) * hd + n0 + 16u, acc21, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 32u) * hd + n0 + 32u, acc22, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 32u) * hd + n0 + 48u, acc23, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 48u) * hd + n0 + 0u, acc30, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 48u) * hd + n0 + 16u, acc31, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 48u) * hd + n0 + 32u, acc32, hd);
    subgroupMatrixStore<row_major>(&y, (r0 + 48u) * hd + n0 + 48u, acc33, hd);
    return;
  }
  subgroupMatrixStore<row_major>(&c_tile, 0u, acc00, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 16u, acc01, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 32u, acc02, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 48u, acc03, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 1024u, acc10, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 1040u, acc11, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 1056u, acc12, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 1072u, acc13, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 2048u, acc20, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 2064u, acc21, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 2080u, acc22, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 2096u, acc23, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 3072u, acc30, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 3088u, acc31, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 3104u, acc32, 64u);
  subgroupMatrixStore<row_major>(&c_tile, 3120u, acc33, 64u);
  workgroupBarrier();
  for (var q = lid; q < 64u * 64u; q += 32u) {
    let r = r0 + q / 64u;
    if (r < r_end) {
      y[r * hd + n0 + q % 64u] = c_tile[q];
    }
  }
}
