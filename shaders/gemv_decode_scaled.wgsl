// y[m, n] (+)= rsqrt(sum_b ss_part[m, b] / k + eps) * (x[m, :] . w[n, :]): the decode GEMV of a
// row already weighted by the layer's input norm weight (x = residual * norm_weight, with the
// residual's sum of squares in params.parts block sums ss_part), as moe_gemm_down_combine leaves
// them (norm_next), so the RMSNorm's scale is all that is left to apply (lib/gemv_lane_groups.wgsl's
// lane groups; forms of one x row a pass, RT = 1). Where gemv_norm multiplies each x vec4 by the
// norm weight and sums its squares as it reads it (about 0.18 ms of a batch-1 step on the H200),
// this reads x as the plain GEMV does, and each lane params.parts / LG block sums at the pass's
// start.
//#include "lib/gemv_lane_groups.wgsl"

// this lane's share of the pass row's block sums, read at the pass's start (before the dot
// products' loads, so not one more round trip to L2 after them)
var<private> row_ss: f32;

fn row_in(i: u32) -> vec4<f32> {
  return x[i];
}

fn pass_begin(r0: u32, lane: u32) {
  var ss = 0.0;
  for (var b = lane; b < params.parts; b += LG) {
    ss += ss_part[r0 * params.parts + b];
  }
  row_ss = ss;
}

fn pass_factor(lane: u32) -> f32 {
  return inverseSqrt(lane_group_sum(row_ss) / f32(params.k) + params.eps);
}
