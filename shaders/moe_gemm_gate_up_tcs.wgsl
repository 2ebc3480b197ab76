// Grouped gate/up GEMM of the MoE experts on f16 subgroup matrices for decode-sized steps,
// the weights staged through workgroup memory, with the SwiGLU epilogue of
// moe_gemm_gate_up_tc:
//   act[r, c] = f16(silu(a[r, :] . w[e, c, :]) * (a[r, :] . w[e, inter + c, :]))
// Weight bound. Subgroup-matrix loads straight from storage moved an expert's weights at about
// 1.3 TB/s on the H200; here the invocations read them as 16-byte words (a and w are
// declared vec4<u32>, 8 f16 a word), write them to workgroup memory, and the matrices load
// from there. One workgroup (one subgroup of 32: matrix offsets stay workgroup-uniform) takes
// CW = 16 act columns of a work item (16 gate and 16 up weight rows) and walks the item's rows
// 16 at a time; each step covers BK = 64 of hidden. The words go through two register sets, one
// for the even steps and one for the odd: each set is loaded again as soon as it is staged, so a
// set's loads are in flight for two steps' products and the other set's staging. On the H200
// (2026-12-01, profile of one 64 x 1024 decode step) that took the kernel from 13.8-13.9 ms a step
// (one set, loaded a step ahead) to 13.4, and at 128 x 1024 from 14.3 to 13.9 in one call. The
// same in moe_gemm_down_tcs, with the select and clamp that stage its words past inter as zeros,
// made that kernel slower (8.4 -> 8.7 ms at 128 x 1024); its tiled forms, whose inter needs no
// masking, take three sets since session 42. hidden must be a multiple of 64, inter of 16.
// 128 of hidden a step (256-byte runs of each weight row, twice the bytes in flight, 15.1 KB of
// workgroup memory against 9.0) took 64 x 1024 decode steps from 36.8 to 38.5 ms on the H200
// (both expert GEMMs so staged, 2026-12-01).
//#include "lib/moe_work_item.wgsl"
//#include "lib/stage_words.wgsl"
//#include "lib/expert_tiles.wgsl"

const BK: u32 = 64u; // hidden a step
const LD: u32 = 72u; // row stride of the staged tiles (f16; 16-byte aligned rows, padded)

// One workgroup struct (see paged_attention_tc.wgsl).
struct Wg {
  b: array<f16, 32u * 72u>, // 32 weight rows (16 gate, 16 up) x BK
  a: array<f16, 16u * 72u>, // 16 rows of a x BK
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
  let inter = params.inter;
  let h8 = params.hidden / 8u; // words a row
  let c0 = wid.x * CW;
  // this workgroup's slot of `tile` (a storage buffer, see MOE_TC_TILE; 512 floats): the gate
  // and up sums [16][32]. Through workgroup memory, 1 KB for both in turn instead of 2
  // took 64 x 1024 decode steps from 36.9 to 34.9 ms and 128 x 1024 from 42.8 to 40.5 on the
  // H200 with the same in moe_gemm_down_tcs (2026-12-01): one subgroup a workgroup, so the
  // workgroup memory bounds how many an SM holds; the slot takes none.
  let slot = moe_workgroup_index(wid, nwg) * SLOT;
  let lr = lid / 8u; // the row of 4 a load covers
  let lk = lid % 8u; // its word in the step's BK
  // weight row j = 4 i + lr of the 32: gate row c0 + j, then up row inter + c0 + j - 16
  var w_at = array<u32, 8>();
  for (var i = 0u; i < 8u; i++) {
    let j = 4u * i + lr;
    let row = select(inter + c0 + j - 16u, c0 + j, j < 16u);
    w_at[i] = (e * 2u * inter * params.hidden + tile_row(row, params.hidden)) / 8u + lk;
  }
  for (var t0 = it.y; t0 < r_end; t0 += 16u) {
    var a_at = array<u32, 4>();
    // rows of the tile past the item's end are neither loaded nor staged: their stale words
    // only reach their own rows of the sums, which are not stored (at 1-8 rows an expert most
    // of a decode step's tile)
    var a_live = array<bool, 4>();
    for (var i = 0u; i < 4u; i++) {
      a_at[i] = (t0 + 4u * i + lr) * h8 + lk;
      a_live[i] = t0 + 4u * i + lr < r_end;
    }
    // two register sets of words: x holds the even steps, y the odd ones; each set's next words
    // are loaded as soon as it is staged, two steps before they are staged (a set is never
    // copied: a copy waits for the loads it moves, and a lab form that moved its second set into
    // the first each step ran no faster than one set)
    var wx = array<vec4<u32>, 8>();
    var ax = array<vec4<u32>, 4>();
    var wy = array<vec4<u32>, 8>();
    var ay = array<vec4<u32>, 4>();
    let last = h8 - BK / 8u; // the last step's first word
    for (var i = 0u; i < 8u; i++) {
      wx[i] = w[w_at[i]];
    }
    for (var i = 0u; i < 4u; i++) {
      if (a_live[i]) {
        ax[i] = a[a_at[i]];
      }
    }
    for (var i = 0u; i < 8u; i++) {
      wy[i] = w[w_at[i] + tile_word(min(BK / 8u, last))];
    }
    for (var i = 0u; i < 4u; i++) {
      if (a_live[i]) {
        ay[i] = a[a_at[i] + min(BK / 8u, last)];
      }
    }
    var g = subgroup_matrix_result<f32, 16, 16>();
    var u = subgroup_matrix_result<f32, 16, 16>();
    for (var k8 = 0u; k8 < h8; k8 += 2u * (BK / 8u)) {
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
      // (past the last step the loads take the last step's words again: in cache, never used)
      for (var i = 0u; i < 8u; i++) {
        wx[i] = w[w_at[i] + tile_word(min(k8 + 2u * (BK / 8u), last))];
      }
      for (var i = 0u; i < 4u; i++) {
        if (a_live[i]) {
          ax[i] = a[a_at[i] + min(k8 + 2u * (BK / 8u), last)];
        }
      }
      let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, LD);
      let g0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
      let u0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD, LD);
      g = subgroupMatrixMultiplyAccumulate(a0, g0, g);
      u = subgroupMatrixMultiplyAccumulate(a0, u0, u);
      let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u, LD);
      let g1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
      let u1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
      g = subgroupMatrixMultiplyAccumulate(a1, g1, g);
      u = subgroupMatrixMultiplyAccumulate(a1, u1, u);
      let a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 32u, LD);
      let g2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u, LD);
      let u2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 32u, LD);
      g = subgroupMatrixMultiplyAccumulate(a2, g2, g);
      u = subgroupMatrixMultiplyAccumulate(a2, u2, u);
      let a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 48u, LD);
      let g3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u, LD);
      let u3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 48u, LD);
      g = subgroupMatrixMultiplyAccumulate(a3, g3, g);
      u = subgroupMatrixMultiplyAccumulate(a3, u3, u);
      // the odd step (set y), where there is one: a uniform branch, the same in every lane
      if (k8 + BK / 8u < h8) {
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
          wy[i] = w[w_at[i] + tile_word(min(k8 + 3u * (BK / 8u), last))];
        }
        for (var i = 0u; i < 4u; i++) {
          if (a_live[i]) {
            ay[i] = a[a_at[i] + min(k8 + 3u * (BK / 8u), last)];
          }
        }
        let b0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, LD);
        let h0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 0u, LD);
        let v0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD, LD);
        g = subgroupMatrixMultiplyAccumulate(b0, h0, g);
        u = subgroupMatrixMultiplyAccumulate(b0, v0, u);
        let b1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 16u, LD);
        let h1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u, LD);
        let v1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 16u, LD);
        g = subgroupMatrixMultiplyAccumulate(b1, h1, g);
        u = subgroupMatrixMultiplyAccumulate(b1, v1, u);
        let b2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 32u, LD);
        let h2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 32u, LD);
        let v2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 32u, LD);
        g = subgroupMatrixMultiplyAccumulate(b2, h2, g);
        u = subgroupMatrixMultiplyAccumulate(b2, v2, u);
        let b3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 48u, LD);
        let h3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 48u, LD);
        let v3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, 16u * LD + 48u, LD);
        g = subgroupMatrixMultiplyAccumulate(b3, h3, g);
        u = subgroupMatrixMultiplyAccumulate(b3, v3, u);
      }
    }
    // the gate and up sums through the slot as one 16 x 32 tile (gate its columns 0-15, up
    // 16-31), one round trip: lane lid takes column lid % 16 of rows lid / 16, + 2, ... (see
    // moe_gemm_down_tcs.wgsl: the gate sums, then the up sums, were slower)
    subgroupMatrixStore<row_major>(&tile, slot, g, 32u);
    subgroupMatrixStore<row_major>(&tile, slot + 16u, u, 32u);
    storageBarrier();
    let c = lid % 16u;
    for (var q = lid / 16u; q < min(r_end - t0, 16u); q += 2u) {
      let gv = tile[slot + q * 32u + c];
      // clamped to f16's largest finite value (an outlier stays finite)
      let v = gv / (1.0 + exp(-gv)) * tile[slot + q * 32u + 16u + c];
      act[(t0 + q) * inter + c0 + c] = T(clamp(v, -65504.0, 65504.0));
    }
    // the next row tile's sums wait until every lane has read these
    storageBarrier();
  }
}
