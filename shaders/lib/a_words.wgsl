// The left operand `a` of the staged tensor-core GEMMs (gemm_tcs, gemm_tcs_sg) as
// 16-byte words of 8 f16, whichever way it is stored:
// - A32 == 0: a is the f16 copy of the activations that cast_f16 writes (declared vec4<u32>,
//   8 f16 an element);
// - A32 == 1: a is the f32 activations themselves (declared vec4<f32>, Variant.f32Inputs),
//   two elements a word, rounded to f16 here when the word is staged, values past f16's range
//   clamped to its largest finite value as cast_f16 does. No cast dispatch runs before these
//   forms.
// A word is loaded raw into an AWord and converted only when it is staged (a_halves), so the
// loads of the next step stay in flight behind this step's products. Word w is f16 word w of
// the row-major [rows, k] operand (k / 8 words a row).
//#include "lib/clamp_f16.wgsl"

struct AWord {
  lo: vec4<u32>,
  hi: vec4<u32>,
}

// The row of a that row r of the workgroup's tile reads: r itself below m, else row m - 1
// (rows past m feed only sums that are never stored; with A32 there are no padded rows, and
// the clamp keeps the loads inside the activations).
fn a_row(r: u32) -> u32 {
  return min(r, max(params.m, 1u) - 1u);
}

fn a_load(w: u32) -> AWord {
  if (A32 != 0u) {
    return AWord(bitcast<vec4<u32>>(a[2u * w]), bitcast<vec4<u32>>(a[2u * w + 1u]));
  }
  return AWord(bitcast<vec4<u32>>(a[w]), vec4<u32>());
}

fn a_pair(v: vec2<u32>) -> u32 {
  let x = clamp(bitcast<vec2<f32>>(v), vec2<f32>(-F16_MAX), vec2<f32>(F16_MAX));
  return bitcast<u32>(vec2<f16>(x));
}

fn a_halves(v: AWord) -> vec4<u32> {
  if (A32 != 0u) {
    return vec4<u32>(a_pair(v.lo.xy), a_pair(v.lo.zw), a_pair(v.hi.xy), a_pair(v.hi.zw));
  }
  return v.lo;
}
