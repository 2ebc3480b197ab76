// Staging of 16-byte words into workgroup memory for the subgroup-matrix loads of the staged
// tensor-core forms (moe_gemm_*_tcs): a word read from a `vec4<u32>` binding holds
// 8 f16. The including shader declares `var<workgroup> wg` with f16 arrays `a` and `b`.

// Writes the 8 f16 of word v to wg.b (put8a: wg.a) from offset at. (Storing them in an
// order rotated by the lane's row group, which makes a store instruction's lanes hit distinct
// banks, measured no faster on the H200.)
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

// Component c (0..3) of v, chosen by selects (a vector indexed at run time went to local memory
// on the H200).
fn pick_word(v: vec4<u32>, c: u32) -> u32 {
  return select(select(v.x, v.y, c == 1u), select(v.z, v.w, c == 3u), c >= 2u);
}

// put8b with the 4 words of v stored in an order rotated by the lane's row group r (0..3): in
// one store instruction lanes of different row groups write different words of their rows, so
// lanes whose rows share a bank offset (rows 72 f16 apart) hit distinct banks.
fn put8b_rot(at: u32, v: vec4<u32>, r: u32) {
  let c0 = r % 4u;
  let c1 = (r + 1u) % 4u;
  let c2 = (r + 2u) % 4u;
  let c3 = (r + 3u) % 4u;
  let h0 = bitcast<vec2<f16>>(pick_word(v, c0));
  let h1 = bitcast<vec2<f16>>(pick_word(v, c1));
  let h2 = bitcast<vec2<f16>>(pick_word(v, c2));
  let h3 = bitcast<vec2<f16>>(pick_word(v, c3));
  wg.b[at + 2u * c0] = h0.x;
  wg.b[at + 2u * c0 + 1u] = h0.y;
  wg.b[at + 2u * c1] = h1.x;
  wg.b[at + 2u * c1 + 1u] = h1.y;
  wg.b[at + 2u * c2] = h2.x;
  wg.b[at + 2u * c2 + 1u] = h2.y;
  wg.b[at + 2u * c3] = h3.x;
  wg.b[at + 2u * c3 + 1u] = h3.y;
}

fn put8a_rot(at: u32, v: vec4<u32>, r: u32) {
  let c0 = r % 4u;
  let c1 = (r + 1u) % 4u;
  let c2 = (r + 2u) % 4u;
  let c3 = (r + 3u) % 4u;
  let h0 = bitcast<vec2<f16>>(pick_word(v, c0));
  let h1 = bitcast<vec2<f16>>(pick_word(v, c1));
  let h2 = bitcast<vec2<f16>>(pick_word(v, c2));
  let h3 = bitcast<vec2<f16>>(pick_word(v, c3));
  wg.a[at + 2u * c0] = h0.x;
  wg.a[at + 2u * c0 + 1u] = h0.y;
  wg.a[at + 2u * c1] = h1.x;
  wg.a[at + 2u * c1 + 1u] = h1.y;
  wg.a[at + 2u * c2] = h2.x;
  wg.a[at + 2u * c2 + 1u] = h2.y;
  wg.a[at + 2u * c3] = h3.x;
  wg.a[at + 2u * c3 + 1u] = h3.y;
}
