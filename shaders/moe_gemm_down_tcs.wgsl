// Grouped down GEMM of the MoE experts on f16 subgroup matrices for decode-sized steps, the
// weights staged through workgroup memory: y[r, n] = act[r, :] . w[e, n, :], as
// moe_gemm_down_tc, staged as moe_gemm_gate_up_tcs.wgsl stages its operands: one workgroup (one
// subgroup of 32) takes CW = 32 output columns (32 weight rows) of a work item and walks its rows
// 16 at a time; each step covers BK (the variant's, 64 or 128) of inter, so each weight row is
// read in runs of 2 BK bytes (64 output columns with 64-byte runs moved the down weights at 1.9
// TB/s on the H200, 128-byte runs 2.2). Words past inter are staged as zeros (inter need only be a multiple of 16). A row tile's
// sums go through workgroup memory and only the item's rows are stored. hidden must be a
// multiple of 32; act holds 64 rows past the last item (the gate/up GEMM's padding).
//#include "lib/moe_work_item.wgsl"
//#include "lib/stage_words.wgsl"

// BK (inter a step) comes from the variant
const LD: u32 = BK + 8u; // row stride of the staged tiles (f16; 16-byte aligned rows, padded)
const WPR: u32 = BK / 8u; // words of a row a step
const RPP: u32 = 32u / WPR; // rows one load instruction of the subgroup covers
const NB: u32 = 32u / RPP; // weight words a lane loads a step (32 rows)
const NA: u32 = 16u / RPP; // words of act a lane loads a step (16 rows)
const_assert BK == 64u || BK == 128u;
// ROT 1: stores rotated by the lane's row group (lib/stage_words.wgsl put8b_rot; BK 64 only)
const_assert ROT == 0u || (ROT == 1u && BK == 64u);

// One workgroup struct (see paged_attention_tc.wgsl).
struct Wg {
  b: array<f16, 32u * LD>, // 32 weight rows x BK
  a: array<f16, 16u * LD>, // 16 rows of act x BK
  s: array<f32, 16u * 32u>, // the sums [16 rows][32 columns]
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
  let i8 = params.inter / 8u; // words a row
  let n0 = wid.x * CW;
  let lr = lid / WPR; // the row of RPP a load covers
  let lk = lid % WPR; // its word in the step's BK
  let zero = vec4<u32>(0u);
  var w_at = array<u32, NB>();
  for (var i = 0u; i < NB; i++) {
    w_at[i] = (e * hd + n0 + RPP * i + lr) * i8;
  }
  for (var t0 = it.y; t0 < r_end; t0 += 16u) {
    var a_at = array<u32, NA>();
    for (var i = 0u; i < NA; i++) {
      a_at[i] = (t0 + RPP * i + lr) * i8;
    }
    // this lane's word of the step (a word past inter reads the last one: staged as zero)
    var wk = lk;
    var wv = array<vec4<u32>, NB>();
    var av = array<vec4<u32>, NA>();
    for (var i = 0u; i < NB; i++) {
      wv[i] = select(zero, w[w_at[i] + min(wk, i8 - 1u)], wk < i8);
    }
    for (var i = 0u; i < NA; i++) {
      av[i] = select(zero, act[a_at[i] + min(wk, i8 - 1u)], wk < i8);
    }
    var y0 = subgroup_matrix_result<f32, 16, 16>();
    var y1 = subgroup_matrix_result<f32, 16, 16>();
    for (var k8 = 0u; k8 < i8; k8 += WPR) {
      // the previous step's matrices are loaded: stage this step's words
      workgroupBarrier();
      for (var i = 0u; i < NB; i++) {
        if (ROT == 1u) {
          put8b_rot((RPP * i + lr) * LD + 8u * lk, wv[i], lr);
        } else {
          put8b((RPP * i + lr) * LD + 8u * lk, wv[i]);
        }
      }
      for (var i = 0u; i < NA; i++) {
        if (ROT == 1u) {
          put8a_rot((RPP * i + lr) * LD + 8u * lk, av[i], lr);
        } else {
          put8a((RPP * i + lr) * LD + 8u * lk, av[i]);
        }
      }
      workgroupBarrier();
      // the next step's words
      wk += WPR;
      let at = min(wk, i8 - 1u);
      for (var i = 0u; i < NB; i++) {
        wv[i] = select(zero, w[w_at[i] + at], wk < i8);
      }
      for (var i = 0u; i < NA; i++) {
        av[i] = select(zero, act[a_at[i] + at], wk < i8);
      }
      // 64 of inter at a time, the products written out
      for (var h = 0u; h < BK; h += 64u) {
        let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, h, LD);
        let p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, h, LD);
        let q0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + h, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a0, p0, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a0, q0, y1);
        let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, h + 16u, LD);
        let p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, h + 16u, LD);
        let q1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + h + 16u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a1, p1, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a1, q1, y1);
        let a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, h + 32u, LD);
        let p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, h + 32u, LD);
        let q2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + h + 32u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a2, p2, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a2, q2, y1);
        let a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, h + 48u, LD);
        let p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, h + 48u, LD);
        let q3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + h + 48u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a3, p3, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a3, q3, y1);
      }
    }
    subgroupMatrixStore<row_major>(&wg.s, 0u, y0, 32u);
    subgroupMatrixStore<row_major>(&wg.s, 16u, y1, 32u);
    workgroupBarrier();
    for (var q = lid; q < 16u * 32u; q += 32u) {
      let r = t0 + q / 32u;
      if (r < r_end) {
        y[r * hd + n0 + q % 32u] = wg.s[q];
      }
    }
    // the next row tile's sums wait until every lane has read these
    workgroupBarrier();
  }
}
