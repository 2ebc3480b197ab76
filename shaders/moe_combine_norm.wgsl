// moe_combine with the next layer's input RMSNorm fused, one workgroup per token:
//   residual[t, :] += sum_j topk_weights[t, j] * y[row_of[t, j], :]
//   out[t, :] = residual[t, :] * rsqrt(mean(residual[t, :]^2) + eps) * weight
// The k expert rows are summed in j order, as in moe_combine (deterministic, no float
// atomics); a row_of outside the rows adds nothing. One dispatch a layer fewer than
// moe_combine and rmsnorm, and the new residual row is read back from cache, not memory.
// With write_f16 the normed row also goes to out16 as f16 (clamped to f16's range, as
// cast_f16 writes it): the next layer's tensor-core qkv GEMM reads it with no cast dispatch.
// Without write_f32 the f32 rows are left out (`out` unwritten): where that GEMM reads only the
// f16 rows, nothing reads them (at 16384 tokens 128 MB a layer not written).
// With params.partials > 0 the residual first takes the o projection's split-K partial sums
// (o_part, in order: splitk_reduce's), which the split router read without writing them back.
// With Y16 = 1 (the -y16 forms) the rows come from y16 as f16 (lib/combine_y.wgsl).
// Bytes: tokens * hidden * (8 + 4 * write_f32 + sizeof(T) * write_f16 + sizeof(y) * k +
// 4 * partials) + tokens * k * 8 + hidden * sizeof(T).
//#include "lib/workgroup_sum.wgsl"
//#include "lib/clamp_f16.wgsl"
//#include "lib/combine_y.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let t = wid.x + wid.y * nwg.x;
  if (t >= params.tokens) {
    return;
  }
  let h4 = params.hidden / 4u;
  let rows = params.tokens * params.top_k;
  var ss = 0.0;
  for (var c = lid; c < h4; c += WG) {
    var acc = vec4<f32>(0.0);
    for (var j = 0u; j < params.top_k; j++) {
      let row = row_of[t * params.top_k + j];
      if (row < rows) {
        acc += topk_weights[t * params.top_k + j] * y4(row * h4 + c);
      }
    }
    var r = residual[t * h4 + c];
    for (var s = 0u; s < params.partials; s++) {
      r += o_part[s * params.tokens * h4 + t * h4 + c];
    }
    let v = r + acc;
    residual[t * h4 + c] = v;
    ss += dot(v, v);
  }
  let total = workgroup_sum(ss, lid);
  let scale = inverseSqrt(total / f32(params.hidden) + params.eps);
  for (var c = lid; c < h4; c += WG) {
    // this invocation's own row values, written above
    let v = residual[t * h4 + c] * scale;
    let o = t * params.hidden + 4u * c;
    let n = vec4<f32>(
      v.x * f32(weight[4u * c]),
      v.y * f32(weight[4u * c + 1u]),
      v.z * f32(weight[4u * c + 2u]),
      v.w * f32(weight[4u * c + 3u]),
    );
    if (params.write_f32 != 0u) {
      out[o] = n.x;
      out[o + 1u] = n.y;
      out[o + 2u] = n.z;
      out[o + 3u] = n.w;
    }
    if (params.write_f16 != 0u) {
      out16[t * h4 + c] = vec4<T>(clamp_f16(n));
    }
  }
}
