// Grouped gate/up GEMM of the MoE experts on f16 subgroup matrices with the SwiGLU epilogue,
// prefill form: act[r, c] = f16(silu(x . w[e, c, :]) * (x . w[e, inter + c, :])), x =
// a[sorted_token[r], :], for the rows r of a work item (expert e), as moe_gemm_gate_up_tc.wgsl
// computes it from rows gathered in expert order, here reading the token rows of `a` (the
// step's f16 activations, cast_f16) through `sorted_token` as it stages them, with both
// operands staged through double-buffered workgroup memory the way gemm_tcp.wgsl stages them
// (see there: a step's 16-byte words stored into the buffer the previous step did not read,
// the next words loaded, then this step's products; one barrier a step; PF = 2, the lab `p2`
// form: each word loaded two steps before it is staged, from two register sets). A workgroup of
// WN x WM subgroups of 32 takes a work item's TM = 64 WM rows x CW = 32 WN act columns; subgroup
// (sm, sn) multiplies the rows 64 sm .. by 64 staged weight rows, the 32 gate rows of its act
// columns 32 sn .. 32 sn + 31 then their 32 up rows, as 4 x 4 tiles of 16 (tile columns 0-1
// gate, 2-3 up). With WM = 2 each staged weight word feeds 128 rows: the staging stores per
// product, which bound these kernels on the H200, drop by 40%. The matrix offsets differ
// between subgroups (Variant.perSubgroupMatrices). Rows past the item's end read the item's
// last token row, and are computed and not stored.
// Requires: hidden a multiple of BK, inter of CW; items of at most TM rows; subgroups of
// exactly 32, consecutive.
//#include "lib/moe_work_item.wgsl"
//#include "lib/stage_words.wgsl"
//#include "lib/expert_tiles.wgsl"

const SW: u32 = 256u;
const KW: u32 = BK / 8u; // words of a row a step
const LD: u32 = BK + 8u; // row stride of the staged tiles (f16): 16-byte rows, no bank clash
// rows of a work item a workgroup takes: WM groups of 64, one subgroup row a group
const TM: u32 = 64u * WM;
const THREADS: u32 = 32u * WN * WM;
const BW: u32 = 64u * WN; // weight rows staged a step
// words each invocation loads a step, of the item's rows and of the weights
const NA: u32 = TM * KW / THREADS;
const NB: u32 = BW * KW / THREADS;
const_assert BK == 16u || BK == 32u;
const_assert PF == 1u || PF == 2u;
const_assert WM == 1u || WM == 2u;
const_assert NA * THREADS == TM * KW && NB * THREADS == BW * KW;

// One workgroup struct (see paged_attention_tc.wgsl): two buffers of each operand, and a
// 16 x 16 f32 tile a subgroup (two for gate/up) for the write-out.
struct Wg {
  a: array<f16, 2u * TM * LD>,
  b: array<f16, 2u * BW * LD>,
  s: array<f32, SW * WN * WM>,
}
var<workgroup> wg: Wg;

// The weight row (of w[e]) that staged row q of a step holds: subgroup q / 64's act columns,
// gate rows first.
fn weight_row(c0: u32, q: u32) -> u32 {
  let j = q / 64u;
  let t = q % 64u;
  return select(c0 + 32u * j + t, params.inter + c0 + 32u * j + t - 32u, t >= 32u);
}

@compute @workgroup_size(THREADS)
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
  let k8 = params.hidden / 8u; // words a row
  let c0 = wid.x * CW;
  let sg = lid / 32u;
  let lane = lid % 32u;
  // this subgroup's 64 rows (group sm) and 64 weight rows (group sn) of the workgroup's tile
  let sm = sg % WM;
  let sn = sg / WM;
  // word q = lid + THREADS i of a step: row q / KW, word q % KW; where it is read and staged
  var a_at = array<u32, NA>();
  var a_st = array<u32, NA>();
  for (var i = 0u; i < NA; i++) {
    let q = lid + THREADS * i;
    a_at[i] = sorted_token[min(r0 + q / KW, r_end - 1u)] * k8 + q % KW;
    a_st[i] = (q / KW) * LD + 8u * (q % KW);
  }
  var b_at = array<u32, NB>();
  var b_st = array<u32, NB>();
  for (var i = 0u; i < NB; i++) {
    let q = lid + THREADS * i;
    b_at[i] = (e * 2u * params.inter * params.hidden + tile_row(weight_row(c0, q / KW), params.hidden)) / 8u +
      q % KW;
    b_st[i] = (q / KW) * LD + 8u * (q % KW);
  }
  var av = array<vec4<u32>, NA>();
  var bv = array<vec4<u32>, NB>();
  // the first step staged into buffer 0, the second's words loaded
  for (var i = 0u; i < NA; i++) {
    put8a(a_st[i], a[a_at[i]]);
  }
  for (var i = 0u; i < NB; i++) {
    put8b(b_st[i], w[b_at[i]]);
  }
  // (PF = 2: the second step's words in the second set, the third step's in the first)
  var av1 = array<vec4<u32>, NA>();
  var bv1 = array<vec4<u32>, NB>();
  let s1 = min(KW, k8 - KW);
  if (PF == 2u) {
    for (var i = 0u; i < NA; i++) {
      av1[i] = a[a_at[i] + s1];
    }
    for (var i = 0u; i < NB; i++) {
      bv1[i] = w[b_at[i] + tile_word(s1)];
    }
  }
  let s1p = min(PF * KW, k8 - KW);
  for (var i = 0u; i < NA; i++) {
    av[i] = a[a_at[i] + s1p];
  }
  for (var i = 0u; i < NB; i++) {
    bv[i] = w[b_at[i] + tile_word(s1p)];
  }
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
  workgroupBarrier();
  var buf = 0u;
  for (var s = 0u; s < k8; s += KW) {
    // stage the next step into the other buffer (the previous step read it before the last
    // barrier) and load the words of the step after (the last ones load themselves again:
    // in cache, never used)
    if (s + KW < k8) {
      let ao = (1u - buf) * TM * LD;
      let bo = (1u - buf) * BW * LD;
      let s2 = min(s + (PF + 1u) * KW, k8 - KW);
      // (PF = 2: the set that holds the next step's words, by the step's parity)
      if (PF == 1u || (s / KW) % 2u == 1u) {
        for (var i = 0u; i < NA; i++) {
          put8a(ao + a_st[i], av[i]);
        }
        for (var i = 0u; i < NB; i++) {
          put8b(bo + b_st[i], bv[i]);
        }
        for (var i = 0u; i < NA; i++) {
          av[i] = a[a_at[i] + s2];
        }
        for (var i = 0u; i < NB; i++) {
          bv[i] = w[b_at[i] + tile_word(s2)];
        }
      } else {
        for (var i = 0u; i < NA; i++) {
          put8a(ao + a_st[i], av1[i]);
        }
        for (var i = 0u; i < NB; i++) {
          put8b(bo + b_st[i], bv1[i]);
        }
        for (var i = 0u; i < NA; i++) {
          av1[i] = a[a_at[i] + s2];
        }
        for (var i = 0u; i < NB; i++) {
          bv1[i] = w[b_at[i] + tile_word(s2)];
        }
      }
    }
    // this step's products: 16 of k at a time
    let xa = (buf * TM + 64u * sm) * LD;
    let xb = (buf * BW + 64u * sn) * LD;
    var p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb, LD);
    var p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u * LD, LD);
    var p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 32u * LD, LD);
    var p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 48u * LD, LD);
    var x0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa, LD);
    var x1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 16u * LD, LD);
    var x2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 32u * LD, LD);
    var x3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 48u * LD, LD);
    acc00 = subgroupMatrixMultiplyAccumulate(x0, p0, acc00);
    acc01 = subgroupMatrixMultiplyAccumulate(x0, p1, acc01);
    acc02 = subgroupMatrixMultiplyAccumulate(x0, p2, acc02);
    acc03 = subgroupMatrixMultiplyAccumulate(x0, p3, acc03);
    acc10 = subgroupMatrixMultiplyAccumulate(x1, p0, acc10);
    acc11 = subgroupMatrixMultiplyAccumulate(x1, p1, acc11);
    acc12 = subgroupMatrixMultiplyAccumulate(x1, p2, acc12);
    acc13 = subgroupMatrixMultiplyAccumulate(x1, p3, acc13);
    acc20 = subgroupMatrixMultiplyAccumulate(x2, p0, acc20);
    acc21 = subgroupMatrixMultiplyAccumulate(x2, p1, acc21);
    acc22 = subgroupMatrixMultiplyAccumulate(x2, p2, acc22);
    acc23 = subgroupMatrixMultiplyAccumulate(x2, p3, acc23);
    acc30 = subgroupMatrixMultiplyAccumulate(x3, p0, acc30);
    acc31 = subgroupMatrixMultiplyAccumulate(x3, p1, acc31);
    acc32 = subgroupMatrixMultiplyAccumulate(x3, p2, acc32);
    acc33 = subgroupMatrixMultiplyAccumulate(x3, p3, acc33);
    if (BK > 16u) {
      p0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u, LD);
      p1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 16u * LD + 16u, LD);
      p2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 32u * LD + 16u, LD);
      p3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.b, xb + 48u * LD + 16u, LD);
      x0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 16u, LD);
      x1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 16u * LD + 16u, LD);
      x2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 32u * LD + 16u, LD);
      x3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, xa + 48u * LD + 16u, LD);
      acc00 = subgroupMatrixMultiplyAccumulate(x0, p0, acc00);
      acc01 = subgroupMatrixMultiplyAccumulate(x0, p1, acc01);
      acc02 = subgroupMatrixMultiplyAccumulate(x0, p2, acc02);
      acc03 = subgroupMatrixMultiplyAccumulate(x0, p3, acc03);
      acc10 = subgroupMatrixMultiplyAccumulate(x1, p0, acc10);
      acc11 = subgroupMatrixMultiplyAccumulate(x1, p1, acc11);
      acc12 = subgroupMatrixMultiplyAccumulate(x1, p2, acc12);
      acc13 = subgroupMatrixMultiplyAccumulate(x1, p3, acc13);
      acc20 = subgroupMatrixMultiplyAccumulate(x2, p0, acc20);
      acc21 = subgroupMatrixMultiplyAccumulate(x2, p1, acc21);
      acc22 = subgroupMatrixMultiplyAccumulate(x2, p2, acc22);
      acc23 = subgroupMatrixMultiplyAccumulate(x2, p3, acc23);
      acc30 = subgroupMatrixMultiplyAccumulate(x3, p0, acc30);
      acc31 = subgroupMatrixMultiplyAccumulate(x3, p1, acc31);
      acc32 = subgroupMatrixMultiplyAccumulate(x3, p2, acc32);
      acc33 = subgroupMatrixMultiplyAccumulate(x3, p3, acc33);
    }
    workgroupBarrier();
    buf = 1u - buf;
  }
  let col = c0 + 32u * sn;
  let rb = r0 + 64u * sm;
  put_act(acc00, acc02, sg, lane, rb, r_end, col);
  put_act(acc01, acc03, sg, lane, rb, r_end, col + 16u);
  put_act(acc10, acc12, sg, lane, rb + 16u, r_end, col);
  put_act(acc11, acc13, sg, lane, rb + 16u, r_end, col + 16u);
  put_act(acc20, acc22, sg, lane, rb + 32u, r_end, col);
  put_act(acc21, acc23, sg, lane, rb + 32u, r_end, col + 16u);
  put_act(acc30, acc32, sg, lane, rb + 48u, r_end, col);
  put_act(acc31, acc33, sg, lane, rb + 48u, r_end, col + 16u);
}

// Writes act's 16 x 16 at row r0, column c0 from its gate and up sums through the subgroup's
// tile of wg.s (the gate sums into registers first, then the up sums): silu(gate) * up, clamped
// to f16's largest finite value (an outlier stays finite), the rows below r_end only. Every
// subgroup calls it in the same order (barriers).
fn put_act(
  g: subgroup_matrix_result<f32, 16, 16>,
  u: subgroup_matrix_result<f32, 16, 16>,
  sg: u32,
  lane: u32,
  r0: u32,
  r_end: u32,
  c0: u32,
) {
  subgroupMatrixStore<row_major>(&wg.s, sg * SW, g, 16u);
  workgroupBarrier();
  var gs = array<f32, 8>();
  for (var i = 0u; i < 8u; i++) {
    gs[i] = wg.s[sg * SW + lane + 32u * i];
  }
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&wg.s, sg * SW, u, 16u);
  workgroupBarrier();
  for (var i = 0u; i < 8u; i++) {
    let q = lane + 32u * i;
    let r = r0 + q / 16u;
    if (r < r_end) {
      let v = gs[i] / (1.0 + exp(-gs[i])) * wg.s[sg * SW + q];
      act[r * params.inter + c0 + q % 16u] = T(clamp(v, -65504.0, 65504.0));
    }
  }
  workgroupBarrier();
}
