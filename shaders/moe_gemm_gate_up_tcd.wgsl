// Grouped gate/up GEMM of the MoE experts on f16 subgroup matrices for decode-sized steps
// (a few rows an expert), with the SwiGLU epilogue of moe_gemm_gate_up_tc:
//   act[r, c] = f16(silu(a[r, :] . w[e, c, :]) * (a[r, :] . w[e, inter + c, :]))
// Weight bound: one workgroup (one subgroup of 32, so every matrix offset is
// workgroup-uniform) takes 32 act columns of a work item (2 gate and 2 up tiles of 16 weight
// rows) and walks the item's rows 16 at a time, so an expert with 1-16 rows pays one pass
// over its weights and 4 accumulators (the prefill form keeps 16 for 64 rows: more
// workgroups fit an SM here, more weight loads in flight). Each step of the k loop covers two
// 16-wide k slices and loads the next step's ten matrices before this step's products.
// Rows past the item's end (the next item's, or the 64 rows of zero padding) are computed and
// not stored. hidden must be a multiple of 32, inter of 32.
//#include "lib/moe_work_item.wgsl"

// Every workgroup variable a member of one struct (see paged_attention_tc.wgsl: separate
// workgroup arrays next to subgroup-matrix stores read wrong values on the H200's driver).
struct Wg {
  g: array<f32, 16u * 32u>, // [16 rows][32 act columns]: gate sums
  u: array<f32, 16u * 32u>, // up sums
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
  let c0 = wid.x * 32u;
  let g0_at = (e * 2u * inter + c0) * hd;
  let g1_at = g0_at + 16u * hd;
  let u0_at = g0_at + inter * hd;
  let u1_at = u0_at + 16u * hd;
  for (var t0 = it.y; t0 < r_end; t0 += 16u) {
    let a_at = t0 * hd;
    var g0 = subgroup_matrix_result<f32, 16, 16>();
    var g1 = subgroup_matrix_result<f32, 16, 16>();
    var u0 = subgroup_matrix_result<f32, 16, 16>();
    var u1 = subgroup_matrix_result<f32, 16, 16>();
    var bg0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g0_at, hd);
    var bg1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g1_at, hd);
    var bu0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u0_at, hd);
    var bu1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u1_at, hd);
    var a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a_at, hd);
    var cg0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g0_at + 16u, hd);
    var cg1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g1_at + 16u, hd);
    var cu0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u0_at + 16u, hd);
    var cu1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u1_at + 16u, hd);
    var a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a_at + 16u, hd);
    for (var k0 = 0u; k0 < hd; k0 += 32u) {
      let pg0 = bg0;
      let pg1 = bg1;
      let pu0 = bu0;
      let pu1 = bu1;
      let pa0 = a0;
      let qg0 = cg0;
      let qg1 = cg1;
      let qu0 = cu0;
      let qu1 = cu1;
      let pa1 = a1;
      // the next step's slices (the last step loads itself again: in cache, never used)
      let kn = min(k0 + 32u, hd - 32u);
      bg0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g0_at + kn, hd);
      bg1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g1_at + kn, hd);
      bu0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u0_at + kn, hd);
      bu1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u1_at + kn, hd);
      a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a_at + kn, hd);
      cg0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g0_at + kn + 16u, hd);
      cg1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, g1_at + kn + 16u, hd);
      cu0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u0_at + kn + 16u, hd);
      cu1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&w, u1_at + kn + 16u, hd);
      a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a_at + kn + 16u, hd);
      g0 = subgroupMatrixMultiplyAccumulate(pa0, pg0, g0);
      g1 = subgroupMatrixMultiplyAccumulate(pa0, pg1, g1);
      u0 = subgroupMatrixMultiplyAccumulate(pa0, pu0, u0);
      u1 = subgroupMatrixMultiplyAccumulate(pa0, pu1, u1);
      g0 = subgroupMatrixMultiplyAccumulate(pa1, qg0, g0);
      g1 = subgroupMatrixMultiplyAccumulate(pa1, qg1, g1);
      u0 = subgroupMatrixMultiplyAccumulate(pa1, qu0, u0);
      u1 = subgroupMatrixMultiplyAccumulate(pa1, qu1, u1);
    }
    subgroupMatrixStore<row_major>(&wg.g, 0u, g0, 32u);
    subgroupMatrixStore<row_major>(&wg.g, 16u, g1, 32u);
    subgroupMatrixStore<row_major>(&wg.u, 0u, u0, 32u);
    subgroupMatrixStore<row_major>(&wg.u, 16u, u1, 32u);
    workgroupBarrier();
    for (var q = lid; q < 16u * 32u; q += 32u) {
      let r = t0 + q / 32u;
      if (r < r_end) {
        let g = wg.g[q];
        // clamped to f16's largest finite value (an outlier stays finite)
        let v = g / (1.0 + exp(-g)) * wg.u[q];
        act[r * inter + c0 + q % 32u] = T(clamp(v, -65504.0, 65504.0));
      }
    }
    // the next row tile's stores wait until every lane has read this one's sums
    workgroupBarrier();
  }
}
