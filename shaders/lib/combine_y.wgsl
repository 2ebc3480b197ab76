// A vec4 of the down GEMM's expert rows as the combines read them: from y (f32), or with
// Y16 = 1 (the -y16 forms) from y16 (f16, written by the down GEMM's -y16 twins).
fn y4(i: u32) -> vec4<f32> {
  if (Y16 != 0u) {
    return vec4<f32>(y16[i]);
  }
  return y[i];
}
