// Grouped down GEMM of the MoE experts on f16 subgroup matrices for decode-sized steps (a few
// rows an expert): y[r, n] = act[r, :] . w[e, n, :], as moe_gemm_down_tc. Weight bound: one
// workgroup (one subgroup of 32) takes 64 output columns of a work item (4 tiles of 16 weight
// rows) and walks the item's rows 16 at a time, so an expert with 1-16 rows pays one pass over
// its weights with 4 accumulators. Each step of the k loop covers two 16-wide k slices and
// loads the next step's ten matrices before this step's products. A row tile's sums go
// through workgroup memory and only the item's rows are stored. hidden must be a multiple of
// 64, inter of 32; act holds 64 rows past the last item (the gate/up GEMM's padding).
//#include "lib/moe_work_item.wgsl"

// One workgroup struct (see moe_gemm_gate_up_tcd.wgsl).
struct Wg {
  c: array<f32, 16u * 64u>, // [16 rows][64 columns]
}
var<workgroup> wg: Wg;

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
  let r_end = it.z;
  let hd = params.hidden;
  let inter = params.inter;
  let n0 = wid.x * 64u;
  let w0_at = (e * hd + n0) * inter;
  let w1_at = w0_at + 16u * inter;
  let w2_at = w0_at + 32u * inter;
  let w3_at = w0_at + 48u * inter;
  for (var t0 = it.y; t0 < r_end; t0 += 16u) {
    let a_at = t0 * inter;
    var y0 = subgroup_matrix_result<f32, 16, 16>();
    var y1 = subgroup_matrix_result<f32, 16, 16>();
    var y2 = subgroup_matrix_result<f32, 16, 16>();
    var y3 = subgroup_matrix_result<f32, 16, 16>();
    var b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w0_at, inter);
    var b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w1_at, inter);
    var b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w2_at, inter);
    var b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w3_at, inter);
    var a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a_at, inter);
    var c0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w0_at + 16u, inter);
    var c1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w1_at + 16u, inter);
    var c2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w2_at + 16u, inter);
    var c3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w3_at + 16u, inter);
    var a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a_at + 16u, inter);
    for (var k0 = 0u; k0 < inter; k0 += 32u) {
      let pb0 = b0;
      let pb1 = b1;
      let pb2 = b2;
      let pb3 = b3;
      let pa0 = a0;
      let pc0 = c0;
      let pc1 = c1;
      let pc2 = c2;
      let pc3 = c3;
      let pa1 = a1;
      // the next step's slices (the last step loads itself again: in cache, never used)
      let kn = min(k0 + 32u, inter - 32u);
      b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w0_at + kn, inter);
      b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w1_at + kn, inter);
      b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w2_at + kn, inter);
      b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w3_at + kn, inter);
      a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a_at + kn, inter);
      c0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w0_at + kn + 16u, inter);
      c1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w1_at + kn + 16u, inter);
      c2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w2_at + kn + 16u, inter);
      c3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, w3_at + kn + 16u, inter);
      a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&act, a_at + kn + 16u, inter);
      y0 = subgroupMatrixMultiplyAccumulate(pa0, pb0, y0);
      y1 = subgroupMatrixMultiplyAccumulate(pa0, pb1, y1);
      y2 = subgroupMatrixMultiplyAccumulate(pa0, pb2, y2);
      y3 = subgroupMatrixMultiplyAccumulate(pa0, pb3, y3);
      y0 = subgroupMatrixMultiplyAccumulate(pa1, pc0, y0);
      y1 = subgroupMatrixMultiplyAccumulate(pa1, pc1, y1);
      y2 = subgroupMatrixMultiplyAccumulate(pa1, pc2, y2);
      y3 = subgroupMatrixMultiplyAccumulate(pa1, pc3, y3);
    }
    subgroupMatrixStore<row_major>(&wg.c, 0u, y0, 64u);
    subgroupMatrixStore<row_major>(&wg.c, 16u, y1, 64u);
    subgroupMatrixStore<row_major>(&wg.c, 32u, y2, 64u);
    subgroupMatrixStore<row_major>(&wg.c, 48u, y3, 64u);
    workgroupBarrier();
    for (var q = lid; q < 16u * 64u; q += 32u) {
      let r = t0 + q / 64u;
      if (r < r_end) {
        y[r * hd + n0 + q % 64u] = wg.c[q];
      }
    }
    // the next row tile's stores wait until every lane has read this one's sums
    workgroupBarrier();
  }
}
