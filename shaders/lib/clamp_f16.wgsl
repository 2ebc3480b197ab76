// f16's largest finite value, and an f32 vector clamped to f16's finite range: converted to
// f16, an outlier then stays finite instead of inf (and NaN in the products). The kernels that
// write an f16 copy for the tensor cores clamp with it.
const F16_MAX: f32 = 65504.0;

fn clamp_f16(v: vec4<f32>) -> vec4<f32> {
  return clamp(v, vec4<f32>(-F16_MAX), vec4<f32>(F16_MAX));
}
