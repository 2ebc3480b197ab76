// y[m, n] (+)= rmsnorm(x[m, :]) . w[n, :], the layer's input RMSNorm fused into the decode GEMV
// (lib/gemv_lane_groups.wgsl's lane groups; forms of one row a pass and one weight row a lane
// group, RT = GC = 1):
//   rmsnorm(x[m, :]) = x[m, :] * rsqrt(mean(x[m, :]^2) + eps) * norm_weight
// Each lane group reads its row of x once, word by word, as the dot products do: row_in takes
// x * norm_weight (the weight's 4 values in one load, as the GEMV's weight words) and adds x's
// squares to the lane's share of the row's sum (row_ss); the group's sum of those gives the scale
// its dot products are multiplied by at the end. No workgroup memory and no barrier: where
// rmsnorm (or the combine before it) writes the normed row and the GEMV reads it back, this reads
// the residual row itself. (Summing the squares in a loop of their own before the dot products
// read slower on the H200: 1 x 1024 4.22-4.27 ms against 4.18-4.19, session 38.)
//#include "lib/gemv_lane_groups.wgsl"

// this lane's share of the pass's sum of squares, and the pass's first x vec4
var<private> row_ss: f32;
var<private> row_base: u32;

fn row_in(i: u32) -> vec4<f32> {
  let v = x[i];
  row_ss += dot(v, v);
  return v * t4(norm_weight[i - row_base]);
}

fn pass_begin(r0: u32, lane: u32) {
  row_ss = 0.0;
  row_base = r0 * (params.k / 4u);
}

fn pass_factor(lane: u32) -> f32 {
  return inverseSqrt(lane_group_sum(row_ss) / f32(params.k) + params.eps);
}
