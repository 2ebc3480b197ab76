// Grouped down GEMM of the MoE experts on f16 subgroup matrices for decode-sized steps, the
// weights staged through workgroup memory: y[r, n] = act[r, :] . w[e, n, :], as
// moe_gemm_down_tc, staged as moe_gemm_gate_up_tcs.wgsl stages its operands: one workgroup (one
// subgroup of 32) takes CW = 32 output columns (32 weight rows) of a work item and walks its rows
// 16 at a time; each step covers BK = 64 of inter, so each weight row is read in 128-byte runs
// (64 output columns with 64-byte runs moved the down weights at 1.9 TB/s on the H200, this form
// 2.2). The forms whose weights lie in tiles (EXPERT_TILES, `-t16`: inter a multiple of 64)
// walk the steps through three register sets (moe_gemm_gate_up_tcs.wgsl takes two); the
// row-by-row forms take any inter that is a multiple of 16, stage the words past it as zeros
// and keep one set.
// A row tile's sums go through the workgroup's slot of `tile` (a storage buffer: see
// MOE_TC_TILE) and only the item's rows are stored. hidden must be a multiple of 32; act holds
// 64 rows past the last item (the gate/up GEMM's padding).
//#include "lib/moe_work_item.wgsl"
//#include "lib/stage_words.wgsl"
//#include "lib/expert_tiles.wgsl"

const BK: u32 = 64u; // inter a step
const LD: u32 = 72u; // row stride of the staged tiles (f16; 16-byte aligned rows, padded)

// One workgroup struct (see paged_attention_tc.wgsl).
struct Wg {
  b: array<f16, 32u * 72u>, // 32 weight rows x BK
  a: array<f16, 16u * 72u>, // 16 rows of act x BK
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
  // this workgroup's slot of `tile` (512 floats): the sums [16 rows][32 columns]
  let slot = moe_workgroup_index(wid, nwg) * SLOT;
  let lr = lid / 8u; // the row of 4 a load covers
  let lk = lid % 8u; // its word in the step's BK
  let zero = vec4<u32>(0u);
  var w_at = array<u32, 8>();
  for (var i = 0u; i < 8u; i++) {
    w_at[i] = (e * hd * params.inter + tile_row(n0 + 4u * i + lr, params.inter)) / 8u;
  }
  for (var t0 = it.y; t0 < r_end; t0 += 16u) {
    var a_at = array<u32, 4>();
    // rows past the item's end are neither loaded nor staged (see moe_gemm_gate_up_tcs.wgsl)
    var a_live = array<bool, 4>();
    for (var i = 0u; i < 4u; i++) {
      a_at[i] = (t0 + 4u * i + lr) * i8;
      a_live[i] = t0 + 4u * i + lr < r_end;
    }
    var y0 = subgroup_matrix_result<f32, 16, 16>();
    var y1 = subgroup_matrix_result<f32, 16, 16>();
    if (EXPERT_TILES) {
      // three register sets of words, x, y and z taking the steps in turn, each loaded again as
      // soon as it is staged, three steps before its products (inter a multiple of 64: no word
      // past it, no masking; past the last step the loads take the last step's words again, in
      // cache, never used). On the H200 (session 42, three processes each in turn) two sets took
      // 64 x 1024 decode steps from the one-set form's 25.97-25.98 ms to 25.48-25.50 (48 x 1024
      // 24.94-24.97 -> 24.45-24.46, 128 x 1024 31.23-31.28 -> 30.77-30.80), and three from two
      // sets' 25.59-25.60 to 25.40-25.46 (48 x 1024 24.59-24.64 -> 24.46-24.52, 128 x 1024
      // 30.84-30.98 -> 30.71-30.72). Two sets with the one-set form's masking (the select and
      // clamp of every word) were slower than one set (64 x 1024 26.37-26.43 against 26.02-26.05,
      // sessions 26 and 42)
      let last = i8 - BK / 8u; // the last step's first word
      var wx = array<vec4<u32>, 8>();
      var ax = array<vec4<u32>, 4>();
      var wy = array<vec4<u32>, 8>();
      var ay = array<vec4<u32>, 4>();
      var wz = array<vec4<u32>, 8>();
      var az = array<vec4<u32>, 4>();
      for (var i = 0u; i < 8u; i++) {
        wx[i] = w[w_at[i] + tile_word(min(0u, last) + lk)];
      }
      for (var i = 0u; i < 4u; i++) {
        if (a_live[i]) {
          ax[i] = act[a_at[i] + min(0u, last) + lk];
        }
      }
      for (var i = 0u; i < 8u; i++) {
        wy[i] = w[w_at[i] + tile_word(min(BK / 8u, last) + lk)];
      }
      for (var i = 0u; i < 4u; i++) {
        if (a_live[i]) {
          ay[i] = act[a_at[i] + min(BK / 8u, last) + lk];
        }
      }
      for (var i = 0u; i < 8u; i++) {
        wz[i] = w[w_at[i] + tile_word(min(2u * (BK / 8u), last) + lk)];
      }
      for (var i = 0u; i < 4u; i++) {
        if (a_live[i]) {
          az[i] = act[a_at[i] + min(2u * (BK / 8u), last) + lk];
        }
      }
      for (var k8 = 0u; k8 < i8; k8 += 3u * (BK / 8u)) {
        // the previous step's matrices are loaded: stage this step's words (set x)
        workgroupBarrier();
        for (var i = 0u; i < 8u; i++) {
          put8b((4u * i + lr) * LD + 8u * lk, wx[i]);
        }
        for (var i = 0u; i < 4u; i++) {
          if (a_live[i]) {
            put8a((4u * i + lr) * LD + 8u * lk, ax[i]);
          }
        }
        workgroupBarrier();
        for (var i = 0u; i < 8u; i++) {
          wx[i] = w[w_at[i] + tile_word(min(k8 + 3u * (BK / 8u), last) + lk)];
        }
        for (var i = 0u; i < 4u; i++) {
          if (a_live[i]) {
            ax[i] = act[a_at[i] + min(k8 + 3u * (BK / 8u), last) + lk];
          }
        }
        let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, LD);
        let p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
        let q0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 0u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a0, p0, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a0, q0, y1);
        let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u, LD);
        let p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
        let q1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a1, p1, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a1, q1, y1);
        let a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 32u, LD);
        let p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u, LD);
        let q2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 32u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a2, p2, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a2, q2, y1);
        let a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 48u, LD);
        let p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u, LD);
        let q3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 48u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a3, p3, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a3, q3, y1);
        // the next two steps (sets y and z), where there are: uniform branches
        if (k8 + BK / 8u < i8) {
          workgroupBarrier();
          for (var i = 0u; i < 8u; i++) {
            put8b((4u * i + lr) * LD + 8u * lk, wy[i]);
          }
          for (var i = 0u; i < 4u; i++) {
            if (a_live[i]) {
              put8a((4u * i + lr) * LD + 8u * lk, ay[i]);
            }
          }
          workgroupBarrier();
          for (var i = 0u; i < 8u; i++) {
            wy[i] = w[w_at[i] + tile_word(min(k8 + 4u * (BK / 8u), last) + lk)];
          }
          for (var i = 0u; i < 4u; i++) {
            if (a_live[i]) {
              ay[i] = act[a_at[i] + min(k8 + 4u * (BK / 8u), last) + lk];
            }
          }
          let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, LD);
          let p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
          let q0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 0u, LD);
          y0 = subgroupMatrixMultiplyAccumulate(a0, p0, y0);
          y1 = subgroupMatrixMultiplyAccumulate(a0, q0, y1);
          let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u, LD);
          let p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
          let q1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
          y0 = subgroupMatrixMultiplyAccumulate(a1, p1, y0);
          y1 = subgroupMatrixMultiplyAccumulate(a1, q1, y1);
          let a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 32u, LD);
          let p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u, LD);
          let q2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 32u, LD);
          y0 = subgroupMatrixMultiplyAccumulate(a2, p2, y0);
          y1 = subgroupMatrixMultiplyAccumulate(a2, q2, y1);
          let a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 48u, LD);
          let p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u, LD);
          let q3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 48u, LD);
          y0 = subgroupMatrixMultiplyAccumulate(a3, p3, y0);
          y1 = subgroupMatrixMultiplyAccumulate(a3, q3, y1);
        }
        if (k8 + 2u * (BK / 8u) < i8) {
          workgroupBarrier();
          for (var i = 0u; i < 8u; i++) {
            put8b((4u * i + lr) * LD + 8u * lk, wz[i]);
          }
          for (var i = 0u; i < 4u; i++) {
            if (a_live[i]) {
              put8a((4u * i + lr) * LD + 8u * lk, az[i]);
            }
          }
          workgroupBarrier();
          for (var i = 0u; i < 8u; i++) {
            wz[i] = w[w_at[i] + tile_word(min(k8 + 5u * (BK / 8u), last) + lk)];
          }
          for (var i = 0u; i < 4u; i++) {
            if (a_live[i]) {
              az[i] = act[a_at[i] + min(k8 + 5u * (BK / 8u), last) + lk];
            }
          }
          let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, LD);
          let p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
          let q0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 0u, LD);
          y0 = subgroupMatrixMultiplyAccumulate(a0, p0, y0);
          y1 = subgroupMatrixMultiplyAccumulate(a0, q0, y1);
          let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u, LD);
          let p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
          let q1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
          y0 = subgroupMatrixMultiplyAccumulate(a1, p1, y0);
          y1 = subgroupMatrixMultiplyAccumulate(a1, q1, y1);
          let a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 32u, LD);
          let p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u, LD);
          let q2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 32u, LD);
          y0 = subgroupMatrixMultiplyAccumulate(a2, p2, y0);
          y1 = subgroupMatrixMultiplyAccumulate(a2, q2, y1);
          let a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 48u, LD);
          let p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u, LD);
          let q3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 48u, LD);
          y0 = subgroupMatrixMultiplyAccumulate(a3, p3, y0);
          y1 = subgroupMatrixMultiplyAccumulate(a3, q3, y1);
        }
      }
    } else {
      // this lane's word of the step (a word past inter reads the last one: staged as zero)
      var wk = lk;
      var wv = array<vec4<u32>, 8>();
      var av = array<vec4<u32>, 4>();
      for (var i = 0u; i < 8u; i++) {
        wv[i] = select(zero, w[w_at[i] + tile_word(min(wk, i8 - 1u))], wk < i8);
      }
      for (var i = 0u; i < 4u; i++) {
        if (a_live[i]) {
          av[i] = select(zero, act[a_at[i] + min(wk, i8 - 1u)], wk < i8);
        }
      }
      for (var k8 = 0u; k8 < i8; k8 += BK / 8u) {
        // the previous step's matrices are loaded: stage this step's words
        workgroupBarrier();
        for (var i = 0u; i < 8u; i++) {
          put8b((4u * i + lr) * LD + 8u * lk, wv[i]);
        }
        for (var i = 0u; i < 4u; i++) {
          if (a_live[i]) {
            put8a((4u * i + lr) * LD + 8u * lk, av[i]);
          }
        }
        workgroupBarrier();
        // the next step's words
        wk += BK / 8u;
        let at = min(wk, i8 - 1u);
        for (var i = 0u; i < 8u; i++) {
          wv[i] = select(zero, w[w_at[i] + tile_word(at)], wk < i8);
        }
        for (var i = 0u; i < 4u; i++) {
          if (a_live[i]) {
            av[i] = select(zero, act[a_at[i] + at], wk < i8);
          }
        }
        let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, LD);
        let p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
        let q0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 0u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a0, p0, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a0, q0, y1);
        let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u, LD);
        let p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
        let q1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a1, p1, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a1, q1, y1);
        let a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 32u, LD);
        let p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u, LD);
        let q2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 32u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a2, p2, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a2, q2, y1);
        let a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 48u, LD);
        let p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u, LD);
        let q3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 48u, LD);
        y0 = subgroupMatrixMultiplyAccumulate(a3, p3, y0);
        y1 = subgroupMatrixMultiplyAccumulate(a3, q3, y1);
      }
    }
    // both halves through the slot as one 16 x 32 tile (y0 its columns 0-15, y1 16-31), one
    // round trip: lane lid takes column lid of each of the item's rows. One half at a time (two
    // round trips, four barriers) took 64 x 1024 decode steps 26.02-26.04 ms on the H200
    // against 25.80-25.81 this way, with the same in moe_gemm_gate_up_tcs (session 41)
    subgroupMatrixStore<row_major>(&tile, slot, y0, 32u);
    subgroupMatrixStore<row_major>(&tile, slot + 16u, y1, 32u);
    storageBarrier();
    for (var r = t0; r < min(r_end, t0 + 16u); r++) {
      y[r * hd + n0 + lid] = tile[slot + (r - t0) * 32u + lid];
    }
    // the next row tile's sums wait until every lane has read these
    storageBarrier();
  }
}
