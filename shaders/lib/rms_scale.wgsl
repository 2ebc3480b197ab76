// The scale of an RMSNorm row, 1 / sqrt(mean(x[base .. base + n)^2) + eps): every invocation
// of the workgroup sums its share of the squares, and they meet in workgroup_sum (call it from
// uniform control flow). Needs the f32 binding `x`, params.n, params.eps and the const WG.
//#include "lib/workgroup_sum.wgsl"

fn rms_scale(base: u32, lid: u32) -> f32 {
  var ss = 0.0;
  for (var i = lid; i < params.n; i += WG) {
    let v = x[base + i];
    ss += v * v;
  }
  let total = workgroup_sum(ss, lid);
  return inverseSqrt(total / f32(params.n) + params.eps);
}
