// The register tile of the tiled GEMMs (gemm, moe_gemm_gate_up, moe_gemm_down): a workgroup
// of 128 invocations in an 8 x 16 grid (ty, tx) multiplies a 64-row a tile by a 128-row b
// tile, 16 k deep, both in workgroup memory k-major as vec4s of 4 consecutive rows, the
// row-group slot XORed with tile_swizzle(k) (defined by the including shader, to match how
// it stores). An invocation owns rows 8ty..8ty+7 and columns 4tx..4tx+3 and 64+4tx..64+4tx+3
// (two vec4 halves, so b reads hit no bank twice): 16 vec4 accumulators, [row i][half h] at
// 2i + h. Per k it reads 2 vec4 of a and 2 of b for 64 FMAs.
var<workgroup> a_tile: array<vec4<f32>, 256>; // [BK=16][64 rows / 4], slot ^ tile_swizzle(k)
var<workgroup> b_tile: array<vec4<f32>, 512>; // [BK=16][128 rows / 4], slot ^ tile_swizzle(k)

// acc += this invocation's products over the 16 k of the staged tiles.
fn tile_fma(acc: ptr<function, array<vec4<f32>, 16>>, tx: u32, ty: u32) {
  for (var kk = 0u; kk < 16u; kk++) {
    let s = tile_swizzle(kk);
    let a0 = a_tile[kk * 16u + ((2u * ty) ^ s)];
    let a1 = a_tile[kk * 16u + ((2u * ty + 1u) ^ s)];
    let b0 = b_tile[kk * 32u + (tx ^ s)];
    let b1 = b_tile[kk * 32u + ((tx + 16u) ^ s)];
    (*acc)[0] += a0.x * b0;
    (*acc)[1] += a0.x * b1;
    (*acc)[2] += a0.y * b0;
    (*acc)[3] += a0.y * b1;
    (*acc)[4] += a0.z * b0;
    (*acc)[5] += a0.z * b1;
    (*acc)[6] += a0.w * b0;
    (*acc)[7] += a0.w * b1;
    (*acc)[8] += a1.x * b0;
    (*acc)[9] += a1.x * b1;
    (*acc)[10] += a1.y * b0;
    (*acc)[11] += a1.y * b1;
    (*acc)[12] += a1.z * b0;
    (*acc)[13] += a1.z * b1;
    (*acc)[14] += a1.w * b0;
    (*acc)[15] += a1.w * b1;
  }
}
