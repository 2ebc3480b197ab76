// c[m, n] (+)= sum_k a[m, k] * b[n, k] (+= when params.accumulate: fused residual add), the
// small-m form (the gemm kernel's -t64 variants): 64x64 tiles, BK 16, 256 invocations each
// computing 4x4 outputs; f32 accumulate. Any m, n, k. Twice as many workgroups as gemm.wgsl's
// 64x128 tiles, which pays off where m is a few hundred rows.
var<workgroup> a_tile: array<f32, 1024>; // [BK=16][BM=64]
var<workgroup> b_tile: array<f32, 1024>; // [BK=16][BN=64]

@compute @workgroup_size(256)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let m0 = wid.y * 64u;
  let n0 = wid.x * 64u;
  let tx = lid % 16u;
  let ty = lid / 16u;
  var acc: array<f32, 16>;
  for (var k0 = 0u; k0 < params.k; k0 += 16u) {
    for (var i = 0u; i < 4u; i++) {
      let e = lid + i * 256u;
      let r = e / 16u;
      let kk = e % 16u;
      var av = 0.0;
      if (m0 + r < params.m && k0 + kk < params.k) {
        av = a[(m0 + r) * params.k + k0 + kk];
      }
      a_tile[kk * 64u + r] = av;
      var bv = 0.0;
      if (n0 + r < params.n && k0 + kk < params.k) {
        bv = f32(b[(n0 + r) * params.k + k0 + kk]);
      }
      b_tile[kk * 64u + r] = bv;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 16u; kk++) {
      var av: array<f32, 4>;
      var bv: array<f32, 4>;
      for (var i = 0u; i < 4u; i++) {
        av[i] = a_tile[kk * 64u + ty * 4u + i];
        bv[i] = b_tile[kk * 64u + tx * 4u + i];
      }
      for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
          acc[i * 4u + j] += av[i] * bv[j];
        }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let r = m0 + ty * 4u + i;
    for (var j = 0u; j < 4u; j++) {
      let col = n0 + tx * 4u + j;
      if (r < params.m && col < params.n) {
        let at = r * params.n + col;
        c[at] = select(acc[i * 4u + j], c[at] + acc[i * 4u + j], params.accumulate != 0u);
      }
    }
  }
}
