// Staging of 16-byte words into workgroup memory for the subgroup-matrix loads of the staged
// tensor-core forms (moe_gemm_*_tcs): a word read from a `vec4<u32>` binding holds
// 8 f16. The including shader declares `var<workgroup> wg` with f16 arrays `a` and `b`.

// Writes the 8 f16 of word v to wg.b (put8a: wg.a) from offset at. On the H200 each f16 is one
// store instruction a clock (probe-sgmat: a lane's 12 words 48.7 ns of an SM at 16 workgroups an
// SM). Storing them in an order rotated by the lane's row group, so that a store instruction's
// lanes hit distinct banks, was slower: 52.5 ns in the probe, and the MoE decode GEMMs took 64 x
// 1024 decode steps from 36.8 to 38.7 ms (2026-12-01).
fn put8b(at: u32, v: vec4<u32>) {
  let h0 = bitcast<vec2<f16>>(v.x);
  let h1 = bitcast<vec2<f16>>(v.y);
  let h2 = bitcast<vec2<f16>>(v.z);
  let h3 = bitcast<vec2<f16>>(v.w);
  wg.b[at] = h0.x;
  wg.b[at + 1u] = h0.y;
  wg.b[at + 2u] = h1.x;
  wg.b[at + 3u] = h1.y;
  wg.b[at + 4u] = h2.x;
  wg.b[at + 5u] = h2.y;
  wg.b[at + 6u] = h3.x;
  wg.b[at + 7u] = h3.y;
}

fn put8a(at: u32, v: vec4<u32>) {
  let h0 = bitcast<vec2<f16>>(v.x);
  let h1 = bitcast<vec2<f16>>(v.y);
  let h2 = bitcast<vec2<f16>>(v.z);
  let h3 = bitcast<vec2<f16>>(v.w);
  wg.a[at] = h0.x;
  wg.a[at + 1u] = h0.y;
  wg.a[at + 2u] = h1.x;
  wg.a[at + 3u] = h1.y;
  wg.a[at + 4u] = h2.x;
  wg.a[at + 5u] = h2.y;
  wg.a[at + 6u] = h3.x;
  wg.a[at + 7u] = h3.y;
}
