// The fused q/k/v projection's value j, from its split-K partial sums where it has several: qkv
// holds params.splits slices of params.split_stride values, added in splitk_reduce's order (so
// the reduce dispatch before the reader is left out). The including shader binds qkv (f32) and
// has params.{splits, split_stride}.
fn qkv_at(j: u32) -> f32 {
  var v = qkv[j];
  for (var s = 1u; s < params.splits; s++) {
    v += qkv[s * params.split_stride + j];
  }
  return v;
}
