// Grouped down GEMM of the MoE experts on f16 subgroup matrices, prefill form: y[r, n] =
// act[r, :] . w[e, n, :] for the rows r of a work item (expert e), as moe_gemm_down_tc.wgsl
// computes it, with both operands staged through double-buffered workgroup memory the way
// gemm_tcp.wgsl stages them (see there for why and how: a step's 16-byte words stored into
// the buffer the previous step did not read, the next words loaded, then this step's products;
// one barrier a step; PF = 2, the lab `p2` form: each word loaded two steps before it is
// staged, from two register sets). A workgroup of WN x WM subgroups of 32 takes a work item's
// TM = 64 WM rows x CW = 64 WN output columns; subgroup (sm, sn) the rows 64 sm .. and the 64
// columns at 64 sn as 4 x 4 tiles of 16. The matrix offsets differ between subgroups
// (Variant.perSubgroupMatrices). A full item (TM rows) stores its tiles straight into y, a
// shorter one through workgroup memory, masked. With Y16 = 1 (the -y16 twins) every tile goes
// through workgroup memory into y16 as f16 instead (clamped to f16's finite range), each lane
// writing 8 of a row's values as one 16-byte word: half the bytes the step's combine then
// reads (at 16384 tokens y holds 131072 rows: 1 GB in f32), for two barriers a tile.
// Requires: inter a multiple of BK, hidden of CW; items of at most TM rows; act holds TM rows
// past the last item (the gate/up GEMM's padding); subgroups of exactly 32, consecutive.
//#include "lib/moe_work_item.wgsl"
//#include "lib/stage_words.wgsl"
//#include "lib/expert_tiles.wgsl"
//#include "lib/clamp_f16.wgsl"

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
  let hd = params.hidden;
  let k8 = params.inter / 8u; // words a row
  let n0 = wid.x * CW;
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
    a_at[i] = (r0 + q / KW) * k8 + q % KW;
    a_st[i] = (q / KW) * LD + 8u * (q % KW);
  }
  var b_at = array<u32, NB>();
  var b_st = array<u32, NB>();
  for (var i = 0u; i < NB; i++) {
    let q = lid + THREADS * i;
    b_at[i] = (e * hd * params.inter + tile_row(n0 + q / KW, params.inter)) / 8u + q % KW;
    b_st[i] = (q / KW) * LD + 8u * (q % KW);
  }
  var av = array<vec4<u32>, NA>();
  var bv = array<vec4<u32>, NB>();
  // the first step staged into buffer 0, the second's words loaded
  for (var i = 0u; i < NA; i++) {
    put8a(a_st[i], act[a_at[i]]);
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
      av1[i] = act[a_at[i] + s1];
    }
    for (var i = 0u; i < NB; i++) {
      bv1[i] = w[b_at[i] + tile_word(s1)];
    }
  }
  let s1p = min(PF * KW, k8 - KW);
  for (var i = 0u; i < NA; i++) {
    av[i] = act[a_at[i] + s1p];
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
          av[i] = act[a_at[i] + s2];
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
          av1[i] = act[a_at[i] + s2];
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
  let full = r_end - r0 == TM;
  let col = n0 + 64u * sn;
  let rb = r0 + 64u * sm;
  put_y(acc00, full, sg, lane, rb, r_end, col);
  put_y(acc01, full, sg, lane, rb, r_end, col + 16u);
  put_y(acc02, full, sg, lane, rb, r_end, col + 32u);
  put_y(acc03, full, sg, lane, rb, r_end, col + 48u);
  put_y(acc10, full, sg, lane, rb + 16u, r_end, col);
  put_y(acc11, full, sg, lane, rb + 16u, r_end, col + 16u);
  put_y(acc12, full, sg, lane, rb + 16u, r_end, col + 32u);
  put_y(acc13, full, sg, lane, rb + 16u, r_end, col + 48u);
  put_y(acc20, full, sg, lane, rb + 32u, r_end, col);
  put_y(acc21, full, sg, lane, rb + 32u, r_end, col + 16u);
  put_y(acc22, full, sg, lane, rb + 32u, r_end, col + 32u);
  put_y(acc23, full, sg, lane, rb + 32u, r_end, col + 48u);
  put_y(acc30, full, sg, lane, rb + 48u, r_end, col);
  put_y(acc31, full, sg, lane, rb + 48u, r_end, col + 16u);
  put_y(acc32, full, sg, lane, rb + 48u, r_end, col + 32u);
  put_y(acc33, full, sg, lane, rb + 48u, r_end, col + 48u);
}

// Stores the accumulator of y's 16 x 16 at row r0, column c0: straight into y for a full item,
// else through the subgroup's tile of wg.s, the rows below r_end only; with Y16, through that
// tile into y16 as f16 whatever the item. Every subgroup calls it in the same order (its
// barriers need uniform control flow: full is the workgroup's).
fn put_y(
  t: subgroup_matrix_result<f32, 16, 16>,
  full: bool,
  sg: u32,
  lane: u32,
  r0: u32,
  r_end: u32,
  c0: u32,
) {
  let hd = params.hidden;
  if (full && Y16 == 0u) {
    subgroupMatrixStore<row_major>(&y, r0 * hd + c0, t, hd);
    return;
  }
  subgroupMatrixStore<row_major>(&wg.s, sg * SW, t, 16u);
  workgroupBarrier();
  if (Y16 != 0u) {
    // lane: row lane / 2, its 8 columns from 8 (lane % 2), one 16-byte word of y16
    let r = r0 + lane / 2u;
    if (r < r_end) {
      let at = sg * SW + lane * 8u;
      let lo = clamp_f16(vec4<f32>(wg.s[at], wg.s[at + 1u], wg.s[at + 2u], wg.s[at + 3u]));
      let hi = clamp_f16(vec4<f32>(wg.s[at + 4u], wg.s[at + 5u], wg.s[at + 6u], wg.s[at + 7u]));
      y16[(r * hd + c0) / 8u + lane % 2u] = vec4<u32>(
        bitcast<u32>(vec2<f16>(lo.xy)),
        bitcast<u32>(vec2<f16>(lo.zw)),
        bitcast<u32>(vec2<f16>(hi.xy)),
        bitcast<u32>(vec2<f16>(hi.zw)),
      );
    }
  } else {
    for (var q = lane; q < 256u; q += 32u) {
      let r = r0 + q / 16u;
      if (r < r_end) {
        y[r * hd + c0 + q % 16u] = wg.s[sg * SW + q];
      }
    }
  }
  workgroupBarrier();
}
