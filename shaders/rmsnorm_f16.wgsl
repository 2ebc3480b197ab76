// out16[r, :] = f16(x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight), clamped to f16's finite
// range as cast_f16 writes it (one workgroup per row): rmsnorm's rows written only as the f16
// operand of a tensor-core GEMM, where rmsnorm and cast_f16 would write f32 then read it back.
//#include "lib/rms_scale.wgsl"
//#include "lib/clamp_f16.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= params.rows) {
    return;
  }
  let base = row * params.n;
  let scale = rms_scale(base, lid);
  for (var i = lid; i < params.n; i += WG) {
    out16[base + i] = f16(clamp(x[base + i] * scale * f32(weight[i]), -F16_MAX, F16_MAX));
  }
}
