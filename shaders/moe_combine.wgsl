// MoE combine with the residual add fused, in place:
//   residual[t, :] += sum_j topk_weights[t, j] * y[row_of[t, j], :]
// One invocation per (token, vec4 of hidden); the k expert rows are summed in j order,
// so the result is deterministic (no float atomics). A row_of outside the rows (an
// assignment moe_dispatch dropped) adds nothing. With params.partials > 0 the residual first
// takes the o projection's split-K partial sums (o_part, in order: splitk_reduce's), which the
// split router read without writing them back.
// With Y16 = 1 (the -y16 form) the rows come from y16 as f16 (lib/combine_y.wgsl).
// Bytes: tokens * hidden * (8 + sizeof(y) * k + 4 * partials) + tokens * k * 8.
//#include "lib/combine_y.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let idx = gid.x + gid.y * nwg.x * WG;
  let h4 = params.hidden / 4u;
  if (idx >= params.tokens * h4) {
    return;
  }
  let t = idx / h4;
  let c = idx % h4;
  let rows = params.tokens * params.top_k;
  var acc = vec4<f32>(0.0);
  for (var j = 0u; j < params.top_k; j++) {
    let row = row_of[t * params.top_k + j];
    if (row < rows) {
      acc += topk_weights[t * params.top_k + j] * y4(row * h4 + c);
    }
  }
  var v = residual[idx];
  for (var s = 0u; s < params.partials; s++) {
    v += o_part[s * params.tokens * h4 + idx];
  }
  residual[idx] = v + acc;
}
