// MoE combine with the residual add (as moe_combine), then the next layer's RMSNorm of the new
// residual, one workgroup per token row:
//   residual[t, :] += sum_j topk_weights[t, j] * y[row_of[t, j], :]
//   out[t, :] = residual[t, :] * rsqrt(mean(residual[t, :]^2) + eps) * weight
// The k expert rows are summed in j order (deterministic); a row_of outside the rows (an
// assignment moe_dispatch dropped) adds nothing. Each invocation reads back only the
// residual elements it wrote itself.
//#include "lib/workgroup_sum.wgsl"

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
  let k = params.top_k;
  let rows = params.tokens * k;
  let base = t * h4;
  var ss = 0.0;
  for (var c = lid; c < h4; c += WG) {
    var acc = vec4<f32>(0.0);
    for (var j = 0u; j < k; j++) {
      let row = row_of[t * k + j];
      if (row < rows) {
        acc += topk_weights[t * k + j] * y[row * h4 + c];
      }
    }
    let v = residual[base + c] + acc;
    residual[base + c] = v;
    ss += dot(v, v);
  }
  let total = workgroup_sum(ss, lid);
  let scale = inverseSqrt(total / f32(params.hidden) + params.eps);
  for (var c = lid; c < h4; c += WG) {
    let w = vec4<f32>(
      f32(weight[4u * c]),
      f32(weight[4u * c + 1u]),
      f32(weight[4u * c + 2u]),
      f32(weight[4u * c + 3u]),
    );
    out[base + c] = residual[base + c] * scale * w;
  }
}
