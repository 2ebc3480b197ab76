// Grouped down GEMM of the MoE experts on f16 subgroup matrices for decode-sized steps, the
// weights staged through workgroup memory: y[r, n] = act[r, :] . w[e, n, :], as
// moe_gemm_down_tc. The invocations read act and w as 16-byte words (declared vec4<u32>, 8 f16
// a word), write them to workgroup memory, and the matrices load from there (see
// moe_gemm_gate_up_tcs.wgsl). One workgroup (one subgroup of 32) takes CW = 64 output columns
// of a work item (64 weight rows) and walks the item's rows 16 at a time; each step covers
// BK = 32 of inter, and the next step's words are loaded before this step's products. A row
// tile's sums go through workgroup memory and only the item's rows are stored. hidden must be
// a multiple of 64, inter of 32; act holds 64 rows past the last item.
//#include "lib/moe_work_item.wgsl"
//#include "lib/stage_words.wgsl"

const BK: u32 = 32u; // inter a step
const LD: u32 = 40u; // row stride of the staged tiles (f16; 16-byte aligned rows, padded)

// One workgroup struct (see paged_attention_tc.wgsl).
struct Wg {
  b: array<f16, 64u * 40u>, // 64 weight rows x BK
  a: array<f16, 16u * 40u>, // 16 rows of act x BK
  s: array<f32, 16u * 64u>, // the sums [16 rows][64 columns]
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
  let lr = lid / 4u; // the row of 8 a load covers
  let lk = lid % 4u; // its word in the step's BK
  var w_at = array<u32, 8>();
  for (var i = 0u; i < 8u; i++) {
    w_at[i] = (e * hd + n0 + 8u * i + lr) * i8 + lk;
  }
  for (var t0 = it.y; t0 < r_end; t0 += 16u) {
    var a_at = array<u32, 2>();
    for (var i = 0u; i < 2u; i++) {
      a_at[i] = (t0 + 8u * i + lr) * i8 + lk;
    }
    var wv = array<vec4<u32>, 8>();
    var av = array<vec4<u32>, 2>();
    for (var i = 0u; i < 8u; i++) {
      wv[i] = w[w_at[i]];
    }
    for (var i = 0u; i < 2u; i++) {
      av[i] = act[a_at[i]];
    }
    var y0 = subgroup_matrix_result<f32, 16, 16>();
    var y1 = subgroup_matrix_result<f32, 16, 16>();
    var y2 = subgroup_matrix_result<f32, 16, 16>();
    var y3 = subgroup_matrix_result<f32, 16, 16>();
    for (var k8 = 0u; k8 < i8; k8 += BK / 8u) {
      // the previous step's matrices are loaded: stage this step's words
      workgroupBarrier();
      for (var i = 0u; i < 8u; i++) {
        put8b((8u * i + lr) * LD + 8u * lk, wv[i]);
      }
      for (var i = 0u; i < 2u; i++) {
        put8a((8u * i + lr) * LD + 8u * lk, av[i]);
      }
      workgroupBarrier();
      // the next step's words (the last step loads itself again: in cache, never used)
      let kn = min(k8 + BK / 8u, i8 - BK / 8u);
      for (var i = 0u; i < 8u; i++) {
        wv[i] = w[w_at[i] + kn];
      }
      for (var i = 0u; i < 2u; i++) {
        av[i] = act[a_at[i] + kn];
      }
      let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, LD);
      let b00 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
      let b10 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD, LD);
      let b20 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u * LD, LD);
      let b30 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u * LD, LD);
      y0 = subgroupMatrixMultiplyAccumulate(a0, b00, y0);
      y1 = subgroupMatrixMultiplyAccumulate(a0, b10, y1);
      y2 = subgroupMatrixMultiplyAccumulate(a0, b20, y2);
      y3 = subgroupMatrixMultiplyAccumulate(a0, b30, y3);
      let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u, LD);
      let b01 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
      let b11 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
      let b21 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u * LD + 16u, LD);
      let b31 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u * LD + 16u, LD);
      y0 = subgroupMatrixMultiplyAccumulate(a1, b01, y0);
      y1 = subgroupMatrixMultiplyAccumulate(a1, b11, y1);
      y2 = subgroupMatrixMultiplyAccumulate(a1, b21, y2);
      y3 = subgroupMatrixMultiplyAccumulate(a1, b31, y3);
    }
    subgroupMatrixStore<row_major>(&wg.s, 0u, y0, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 16u, y1, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 32u, y2, 64u);
    subgroupMatrixStore<row_major>(&wg.s, 48u, y3, 64u);
    workgroupBarrier();
    for (var q = lid; q < 16u * 64u; q += 32u) {
      let r = t0 + q / 64u;
      if (r < r_end) {
        y[r * hd + n0 + q % 64u] = wg.s[q];
      }
    }
    // the next row tile's sums wait until every lane has read these
    workgroupBarrier();
  }
}
