// Grouped gate/up GEMM of the MoE experts on f16 subgroup matrices (tensor cores), with the
// SwiGLU epilogue: for the rows r of a work item (expert e; rows sorted by expert),
//   act[r, c] = f16(silu(a[r, :] . w[e, c, :]) * (a[r, :] . w[e, inter + c, :]))
// where a is the f16 gathered copy of the token rows (moe_gather_f16). One workgroup (one
// subgroup of 32, so every matrix offset is workgroup-uniform) takes a work item's 64 rows
// (4 tiles of 16) x 32 act columns: 4 x 2 gate and 4 x 2 up 16 x 16 accumulators (f32), the
// operands loaded straight from memory, the next k slice's before the current slice's
// products (as gemm_tc). Rows past the item's end (the next item's, or the zero padding)
// are computed and not stored. hidden must be a multiple of 16, inter of 32, items at most
// 64 rows (MOE_BLOCK_M).
//#include "lib/moe_work_item.wgsl"
//#include "lib/expert_tiles.wgsl"

var<workgroup> g_tile: array<f32, 64u * 32u>; // [64 rows][32 act columns]: gate sums
var<workgroup> u_tile: array<f32, 64u * 32u>; // up sums

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
  let c0 = wid.x * 32u;
  let g_at = (e * 2u * inter + c0) * hd;
  let u_at = g_at + inter * hd;
  // w's row stride in a 16 x 16 block (16 rows further on is 16 * hd further on either way)
  let ws = tile_stride(hd);
  var g00 = subgroup_matrix_result<f32, 16, 16>();
  var u00 = subgroup_matrix_result<f32, 16, 16>();
  var g01 = subgroup_matrix_result<f32, 16, 16>();
  var u01 = subgroup_matrix_result<f32, 16, 16>();
  var g10 = subgroup_matrix_result<f32, 16, 16>();
  var u10 = subgroup_matrix_result<f32, 16, 16>();
  var g11 = subgroup_matrix_result<f32, 16, 16>();
  var u11 = subgroup_matrix_result<f32, 16, 16>();
  var g20 = subgroup_matrix_result<f32, 16, 16>();
  var u20 = subgroup_matrix_result<f32, 16, 16>();
  var g21 = subgroup_matrix_result<f32, 16, 16>();
  var u21 = subgroup_matrix_result<f32, 16, 16>();
  var g30 = subgroup_matrix_result<f32, 16, 16>();
  var u30 = subgroup_matrix_result<f32, 16, 16>();
  var g31 = subgroup_matrix_result<f32, 16, 16>();
  var u31 = subgroup_matrix_result<f32, 16, 16>();
  let a0_at = (r0 + 0u) * hd;
  let a1_at = (r0 + 16u) * hd;
  let a2_at = (r0 + 32u) * hd;
  let a3_at = (r0 + 48u) * hd;
  var bg0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g_at + 0u * hd + 0u, ws);
  var bu0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u_at + 0u * hd + 0u, ws);
  var bg1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g_at + 16u * hd + 0u, ws);
  var bu1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u_at + 16u * hd + 0u, ws);
  var a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a0_at + 0u, hd);
  var a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a1_at + 0u, hd);
  var a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a2_at + 0u, hd);
  var a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a3_at + 0u, hd);
  for (var k0 = 0u; k0 < hd; k0 += 16u) {
    let cbg0 = bg0;
    let cbu0 = bu0;
    let cbg1 = bg1;
    let cbu1 = bu1;
    let ca0 = a0;
    let ca1 = a1;
    let ca2 = a2;
    let ca3 = a3;
    // the next slice (the last one loads itself again: in cache, and never used)
    let kn = min(k0 + 16u, hd - 16u);
    bg0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g_at + 0u * hd + tile_col(kn), ws);
    bu0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u_at + 0u * hd + tile_col(kn), ws);
    bg1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g_at + 16u * hd + tile_col(kn), ws);
    bu1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u_at + 16u * hd + tile_col(kn), ws);
    a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a0_at + kn, hd);
    a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a1_at + kn, hd);
    a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a2_at + kn, hd);
    a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a3_at + kn, hd);
    g00 = subgroupMatrixMultiplyAccumulate(ca0, cbg0, g00);
    u00 = subgroupMatrixMultiplyAccumulate(ca0, cbu0, u00);
    g01 = subgroupMatrixMultiplyAccumulate(ca0, cbg1, g01);
    u01 = subgroupMatrixMultiplyAccumulate(ca0, cbu1, u01);
    g10 = subgroupMatrixMultiplyAccumulate(ca1, cbg0, g10);
    u10 = subgroupMatrixMultiplyAccumulate(ca1, cbu0, u10);
    g11 = subgroupMatrixMultiplyAccumulate(ca1, cbg1, g11);
    u11 = subgroupMatrixMultiplyAccumulate(ca1, cbu1, u11);
    g20 = subgroupMatrixMultiplyAccumulate(ca2, cbg0, g20);
    u20 = subgroupMatrixMultiplyAccumulate(ca2, cbu0, u20);
    g21 = subgroupMatrixMultiplyAccumulate(ca2, cbg1, g21);
    u21 = subgroupMatrixMultiplyAccumulate(ca2, cbu1, u21);
    g30 = subgroupMatrixMultiplyAccumulate(ca3, cbg0, g30);
    u30 = subgroupMatrixMultiplyAccumulate(ca3, cbu0, u30);
    g31 = subgroupMatrixMultiplyAccumulate(ca3, cbg1, g31);
    u31 = subgroupMatrixMultiplyAccumulate(ca3, cbu1, u31);
  }
  subgroupMatrixStore<row_major>(&g_tile, 0u, g00, 32u);
  subgroupMatrixStore<row_major>(&u_tile, 0u, u00, 32u);
  subgroupMatrixStore<row_major>(&g_tile, 16u, g01, 32u);
  subgroupMatrixStore<row_major>(&u_tile, 16u, u01, 32u);
  subgroupMatrixStore<row_major>(&g_tile, 512u, g10, 32u);
  subgroupMatrixStore<row_major>(&u_tile, 512u, u10, 32u);
  subgroupMatrixStore<row_major>(&g_tile, 528u, g11, 32u);
  subgroupMatrixStore<row_major>(&u_tile, 528u, u11, 32u);
  subgroupMatrixStore<row_major>(&g_tile, 1024u, g20, 32u);
  subgroupMatrixStore<row_major>(&u_tile, 1024u, u20, 32u);
  subgroupMatrixStore<row_major>(&g_tile, 1040u, g21, 32u);
  subgroupMatrixStore<row_major>(&u_tile, 1040u, u21, 32u);
  subgroupMatrixStore<row_major>(&g_tile, 1536u, g30, 32u);
  subgroupMatrixStore<row_major>(&u_tile, 1536u, u30, 32u);
  subgroupMatrixStore<row_major>(&g_tile, 1552u, g31, 32u);
  subgroupMatrixStore<row_major>(&u_tile, 1552u, u31, 32u);
  workgroupBarrier();
  for (var q = lid; q < 64u * 32u; q += 32u) {
    let r = r0 + q / 32u;
    if (r < r_end) {
      let g = g_tile[q];
      // clamped to f16's largest finite value (an outlier stays finite)
      let v = g / (1.0 + exp(-g)) * u_tile[q];
      act[r * inter + c0 + q % 32u] = T(clamp(v, -65504.0, 65504.0));
    }
  }
}
