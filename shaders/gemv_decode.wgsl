// y[m, n] (+)= sum_k x[m, k] * w[n, k]  (+= when params.accumulate: fused residual add), for
// decode's few rows: lib/gemv_lane_groups.wgsl's lane groups, x as it is.
//#include "lib/gemv_lane_groups.wgsl"

fn row_in(i: u32) -> vec4<f32> {
  return x[i];
}

fn pass_begin(r0: u32, lane: u32) {}

fn pass_factor(lane: u32) -> f32 {
  return 1.0;
}
