// vec4 i of the residual rows as the router kernels read them: x, plus the split-K partial sums an
// o projection left (o_part: [params.partials, params.tokens, params.hidden / 4], added in
// order after x). The including shader binds x and o_part and has params.{tokens, hidden,
// partials}.
fn xin(i: u32) -> vec4<f32> {
  var v = x[i];
  let stride = params.tokens * params.hidden / 4u;
  for (var s = 0u; s < params.partials; s++) {
    v += o_part[s * stride + i];
  }
  return v;
}
