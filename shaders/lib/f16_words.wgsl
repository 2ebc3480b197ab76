// Four f16 values packed in two u32 (half of a 16-byte word that a wide-words form reads), as
// f32.
fn f16x4(a: u32, b: u32) -> vec4<f32> {
  return vec4<f32>(vec2<f32>(bitcast<vec2<f16>>(a)), vec2<f32>(bitcast<vec2<f16>>(b)));
}
