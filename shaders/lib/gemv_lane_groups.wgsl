// The decode GEMV's body and entry point (gemv_decode.wgsl, gemv_decode_norm.wgsl):
//   y[m, n] (+)= f_r * sum_k x'[m, k] * w[n, k]
// (+= when params.accumulate: a fused residual add), or with params.splits > 1 (forms without row
// blocks, RB = 0) split-K partial sums: workgroup z takes the z-th of splits equal parts of k and
// writes y[z, m, n] (never accumulating; the kernels after it add them up). Weight bound for
// decode's few rows: each weight row is read once per RT rows at the HBM rate and applied to every
// row in registers. A lane group of LG invocations owns GC weight rows; its lanes split k in weight
// words (WV vec4s: 8-byte packed words; the GEMV has no 16-byte-word forms, which read slower on
// the H200), UNR loads in flight per row, and meet through subgroup shuffles (no workgroup memory,
// no barrier). x rows come from cache. The including shader defines row_in(i) (x' as vec4 i),
// pass_begin(r0, lane) (before each pass of RT rows from row r0) and pass_factor(lane) (f_r of
// that pass, after its dot products; every lane of the group calls it).
//#include "lib/lane_group_sum.wgsl"
//#include "lib/lane_group_dots.wgsl"
const CPW: u32 = (WG / LG) * GC; // weight rows (output columns) a workgroup owns
const WC: u32 = GC; // weight rows a lane group reads

fn w_index(wo: u32, kk: u32) -> u32 {
  return wo + kk;
}

fn gemv_lane_groups(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
  let n = params.n;
  let c0 = (wid.x + wid.y * nwg.x) * CPW + (lid / LG) * GC;
  if ((wid.x + wid.y * nwg.x) * CPW >= n) {
    return;
  }
  let k4 = params.k / 4u;
  let kw = k4 / WV; // weight words a row
  let lane = lid % LG;
  // this workgroup's part of k: words [split * ks, split * ks + ks) of each row
  let split = select(wid.z, 0u, RB == 1u);
  let ks = kw / params.splits;
  // Rows past n read a valid row and are never written.
  var wo = array<u32, WC>();
  for (var c = 0u; c < GC; c++) {
    wo[c] = min(c0 + c, n - 1u) * kw + split * ks;
  }
  let out0 = split * params.m * n;
  let acc_y = params.accumulate != 0u && params.splits == 1u;
  // RB = 1: workgroup z takes rows [RT z, RT z + RT) (row blocks side by side); else every row
  let r_first = select(0u, wid.z * RT, RB == 1u);
  let r_last = select(params.m, min(params.m, r_first + RT), RB == 1u);
  for (var r0 = r_first; r0 < r_last; r0 += RT) {
    let nr = min(RT, params.m - r0);
    var xo = array<u32, RT>();
    for (var r = 0u; r < RT; r++) {
      xo[r] = (r0 + r) * k4 + split * ks * WV;
    }
    pass_begin(r0, lane);
    // one-row forms adding to y read the values they add to first (at the tail they would be
    // one more round trip to L2 after the dot products; with gemv_scaled's block sums and
    // moe_gemm_down_combine's residual so read early, H200 batch-1 steps took 3.90-3.97 ms
    // against 3.99-4.05 at 1 x 1024, four processes each in turn, session 39 call5)
    var prev = array<f32, GC>();
    if (RT == 1u && acc_y) {
      for (var c = 0u; c < GC; c++) {
        if (lane == c % LG && c0 + c < n) {
          prev[c] = y[out0 + r0 * n + c0 + c];
        }
      }
    }
    let acc = lane_group_dots(wo, xo, nr, ks, lane);
    let f = pass_factor(lane);
    for (var r = 0u; r < RT; r++) {
      if (r < nr) {
        for (var c = 0u; c < GC; c++) {
          let s = lane_group_sum(acc[r * GC + c]) * f;
          if (lane == (r * GC + c) % LG && c0 + c < n) {
            let at = out0 + (r0 + r) * n + c0 + c;
            if (RT == 1u) {
              y[at] = select(s, prev[c] + s, acc_y);
            } else {
              y[at] = select(s, y[at] + s, acc_y);
            }
          }
        }
      }
    }
  }
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  gemv_lane_groups(wid, nwg, lid);
}
