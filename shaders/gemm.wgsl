// c[m, n] (+)= sum_k a[m, k] * b[n, k] (+= when params.accumulate: fused residual add):
// prefill-shaped GEMM, f32 accumulate. Any m, n, k: edges are zero-padded on load and
// masked on store.
// Tile: a workgroup owns 64 rows x 128 columns of c; BK 16. 128 invocations in an 8 x 16
// grid (ty, tx) each accumulate 8 rows x 8 columns (64 f32 registers, as 16 vec4): rows
// 8ty..8ty+7, columns 4tx..4tx+3 and 64+4tx..64+4tx+3 (two vec4 halves, so the 16 tx of a
// subgroup read 64 contiguous floats of b with no bank conflict).
// Workgroup memory (12 KiB): both tiles k-major as vec4s of 4 consecutive rows,
// a_tile [16 k][16 row groups], b_tile [16 k][32 row groups], the row-group slot XORed
// with k % 8. Per k an invocation reads 2 vec4 of a and 2 of b for 64 FMAs (16 FMAs a
// read). Two barriers per 16 k (1024 FMAs an invocation, 131072 a workgroup).
// Loads: a and b are scalar bindings (shared with the f16-sgmat variant, so any k), each
// invocation loads 4 rows x 1 k of a (2 such groups) and of b (4 groups): a subgroup
// reads 4 rows x 8 consecutive k per load (whole 32-byte sectors) and stores one whole
// vec4 per group (each 8 lanes' vec4 stores hit 8 distinct slots: no bank conflict).
// The next tile's loads are issued before the current tile's FMAs (register prefetch).
//#include "lib/tile_64x128.wgsl"

// The tiles' row-group slot XOR at k, as this shader stores them.
fn tile_swizzle(k: u32) -> u32 {
  return k % 8u;
}

// Rows r..r+3 of a at column kc (0 beyond m or k).
fn load_a4(r: u32, kc: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  if (kc < params.k) {
    let at = r * params.k + kc;
    if (r < params.m) {
      v.x = a[at];
    }
    if (r + 1u < params.m) {
      v.y = a[at + params.k];
    }
    if (r + 2u < params.m) {
      v.z = a[at + 2u * params.k];
    }
    if (r + 3u < params.m) {
      v.w = a[at + 3u * params.k];
    }
  }
  return v;
}

// Rows r..r+3 of b at column kc (0 beyond n or k).
fn load_b4(r: u32, kc: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  if (kc < params.k) {
    let at = r * params.k + kc;
    if (r < params.n) {
      v.x = f32(b[at]);
    }
    if (r + 1u < params.n) {
      v.y = f32(b[at + params.k]);
    }
    if (r + 2u < params.n) {
      v.z = f32(b[at + 2u * params.k]);
    }
    if (r + 3u < params.n) {
      v.w = f32(b[at + 3u * params.k]);
    }
  }
  return v;
}

@compute @workgroup_size(128)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let m0 = wid.y * 64u;
  let n0 = wid.x * 128u;
  let tx = lid % 16u;
  let ty = lid / 16u;
  // Loader: column lk of the k tile, row groups lg + 8q (rows 4 * (lg + 8q) ..+3).
  let lk = lid % 8u + 8u * ((lid / 32u) % 2u);
  let lg = (lid / 8u) % 4u + 4u * (lid / 64u);
  let ls = lg ^ (lk % 8u); // swizzled slot of group lg (lg + 8q goes to ls + 8q)
  var pa0 = load_a4(m0 + 4u * lg, lk);
  var pa1 = load_a4(m0 + 4u * lg + 32u, lk);
  var pb0 = load_b4(n0 + 4u * lg, lk);
  var pb1 = load_b4(n0 + 4u * lg + 32u, lk);
  var pb2 = load_b4(n0 + 4u * lg + 64u, lk);
  var pb3 = load_b4(n0 + 4u * lg + 96u, lk);
  var acc = array<vec4<f32>, 16>(); // [row i][half h] at 2i + h
  for (var k0 = 0u; k0 < params.k; k0 += 16u) {
    a_tile[lk * 16u + ls] = pa0;
    a_tile[lk * 16u + ls + 8u] = pa1;
    b_tile[lk * 32u + ls] = pb0;
    b_tile[lk * 32u + ls + 8u] = pb1;
    b_tile[lk * 32u + ls + 16u] = pb2;
    b_tile[lk * 32u + ls + 24u] = pb3;
    workgroupBarrier();
    let kn = k0 + 16u + lk;
    pa0 = load_a4(m0 + 4u * lg, kn);
    pa1 = load_a4(m0 + 4u * lg + 32u, kn);
    pb0 = load_b4(n0 + 4u * lg, kn);
    pb1 = load_b4(n0 + 4u * lg + 32u, kn);
    pb2 = load_b4(n0 + 4u * lg + 64u, kn);
    pb3 = load_b4(n0 + 4u * lg + 96u, kn);
    tile_fma(&acc, tx, ty);
    workgroupBarrier();
  }
  for (var i = 0u; i < 8u; i++) {
    let r = m0 + ty * 8u + i;
    if (r < params.m) {
      for (var h = 0u; h < 2u; h++) {
        let v = acc[2u * i + h];
        let col0 = n0 + h * 64u + tx * 4u;
        for (var j = 0u; j < 4u; j++) {
          let col = col0 + j;
          if (col < params.n) {
            let at = r * params.n + col;
            if (params.accumulate != 0u) {
              c[at] += v[j];
            } else {
              c[at] = v[j];
            }
          }
        }
      }
    }
  }
}
