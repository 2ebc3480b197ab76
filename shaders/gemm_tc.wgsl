// c[m, n] (+)= sum_k a[m, k] * b[n, k] on f16 subgroup matrices (tensor cores) with f32
// accumulation, both operands loaded straight from memory into the matrices (no workgroup
// staging): GPU.md measured 4 x 4 tiles a subgroup this way at 101 TFLOP/s (4096^3, H200),
// where staging through workgroup memory (gemm_subgroup_matrix.wgsl) ran 4x slower than the
// FMA GEMM. One workgroup is one subgroup of 32, so every matrix offset is workgroup-uniform
// (Tint's uniformity rule for subgroup matrices). A workgroup owns MT x 4 tiles of 16 x 16:
// rows m0 .. m0 + 16 MT, columns n0 .. n0 + 64; tile (i, j) accumulates in acc_ij (MT rows
// of four; the rows past MT are constant-false branches).
// Loads are pipelined: the matrices of the next 16-wide k slice are loaded before the
// current slice's products, so a subgroup waits on memory once per slice, not twice.
// Split-K: workgroup z takes k_split of the reduction (k_split a multiple of 16) and, when
// there are several, writes its partial sums to slice z of c ([splits, m, n]; accumulate
// is then 0 and splitk_reduce adds the slices, and the residual, into the output).
// Requires (gemmTcParams): n and k multiples of 16; a is the f16 copy of the activations
// with rows up to a multiple of 16 MT (cast_f16 pads them with zeros; a kernel that writes the
// operand itself, such as prefill attention's -o16 twins, leaves them stale: their products
// are masked), so loads never leave it. Columns past n (n not a multiple of 64) read the last valid 16 rows of b again and
// are not stored. A tile row block past m goes through workgroup memory, masked.
var<workgroup> c_tile: array<f32, 16u * MT * 64u>; // [16 MT rows][64 columns]

// Offset in c_tile of tile row i (always below MT: Tint checks constant offsets against
// the array even in the branches a smaller MT never takes), column col.
fn tile_at(i: u32, col: u32) -> u32 {
  return (i % MT) * 16u * 64u + col;
}

// Offset of b's 16-row block j of this workgroup (clamped to the last valid block).
fn b_row(n0: u32, j: u32) -> u32 {
  return min(n0 + 16u * j, params.n - 16u);
}

@compute @workgroup_size(32)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let m0 = wid.y * 16u * MT;
  let n0 = wid.x * 64u;
  let k = params.k;
  let n = params.n;
  let k_beg = wid.z * params.k_split;
  let k_end = min(k_beg + params.k_split, k);
  // this split's slice of c (the only one without split-K)
  let c0 = wid.z * params.m * n;
  // every row of this block is a row of c (else: through c_tile, masked)
  let full = m0 + 16u * MT <= params.m;
  let acc_on = params.accumulate != 0u;
  var acc00 = subgroup_matrix_result<f32, 16, 16>();
  var acc01 = subgroup_matrix_result<f32, 16, 16>();
  var acc02 = subgroup_matrix_result<f32, 16, 16>();
  var acc03 = subgroup_matrix_result<f32, 16, 16>();
  var acc10 = subgroup_matrix_result<f32, 16, 16>();
  var acc11 = subgroup_matrix_result<f32, 16, 16>();
  var acc12 = subgroup_matrix_result<f32, 16, 16>();
  var acc13 = subgroup_matrix_result<f32, 16, 16>();
  var acc20 = subgroup_matrix_result<f32, 16, 16>();
  var acc21 = subgroup_matrix_result<f32, 16, 16>();
  var acc22 = subgroup_matrix_result<f32, 16, 16>();
  var acc23 = subgroup_matrix_result<f32, 16, 16>();
  var acc30 = subgroup_matrix_result<f32, 16, 16>();
  var acc31 = subgroup_matrix_result<f32, 16, 16>();
  var acc32 = subgroup_matrix_result<f32, 16, 16>();
  var acc33 = subgroup_matrix_result<f32, 16, 16>();
  if (acc_on && !full) {
    for (var e = lid; e < 16u * MT * 64u; e += 32u) {
      let r = m0 + e / 64u;
      let col = n0 + e % 64u;
      var v = 0.0;
      if (r < params.m && col < n) {
        v = c[c0 + r * n + col];
      }
      c_tile[e] = v;
    }
    workgroupBarrier();
  }
  if (acc_on) {
    if (n0 + 0u < n) {
      if (full) {
        acc00 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 0u) * n + n0 + 0u, n);
      } else {
        acc00 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(0u, 0u), 64u);
      }
    }
    if (n0 + 16u < n) {
      if (full) {
        acc01 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 0u) * n + n0 + 16u, n);
      } else {
        acc01 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(0u, 16u), 64u);
      }
    }
    if (n0 + 32u < n) {
      if (full) {
        acc02 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 0u) * n + n0 + 32u, n);
      } else {
        acc02 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(0u, 32u), 64u);
      }
    }
    if (n0 + 48u < n) {
      if (full) {
        acc03 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 0u) * n + n0 + 48u, n);
      } else {
        acc03 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(0u, 48u), 64u);
      }
    }
    if (MT > 1u) {
      if (n0 + 0u < n) {
        if (full) {
          acc10 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 16u) * n + n0 + 0u, n);
        } else {
          acc10 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(1u, 0u), 64u);
        }
      }
      if (n0 + 16u < n) {
        if (full) {
          acc11 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 16u) * n + n0 + 16u, n);
        } else {
          acc11 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(1u, 16u), 64u);
        }
      }
      if (n0 + 32u < n) {
        if (full) {
          acc12 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 16u) * n + n0 + 32u, n);
        } else {
          acc12 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(1u, 32u), 64u);
        }
      }
      if (n0 + 48u < n) {
        if (full) {
          acc13 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 16u) * n + n0 + 48u, n);
        } else {
          acc13 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(1u, 48u), 64u);
        }
      }
    }
    if (MT > 2u) {
      if (n0 + 0u < n) {
        if (full) {
          acc20 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 32u) * n + n0 + 0u, n);
        } else {
          acc20 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(2u, 0u), 64u);
        }
      }
      if (n0 + 16u < n) {
        if (full) {
          acc21 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 32u) * n + n0 + 16u, n);
        } else {
          acc21 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(2u, 16u), 64u);
        }
      }
      if (n0 + 32u < n) {
        if (full) {
          acc22 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 32u) * n + n0 + 32u, n);
        } else {
          acc22 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(2u, 32u), 64u);
        }
      }
      if (n0 + 48u < n) {
        if (full) {
          acc23 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 32u) * n + n0 + 48u, n);
        } else {
          acc23 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(2u, 48u), 64u);
        }
      }
    }
    if (MT > 3u) {
      if (n0 + 0u < n) {
        if (full) {
          acc30 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 48u) * n + n0 + 0u, n);
        } else {
          acc30 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(3u, 0u), 64u);
        }
      }
      if (n0 + 16u < n) {
        if (full) {
          acc31 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 48u) * n + n0 + 16u, n);
        } else {
          acc31 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(3u, 16u), 64u);
        }
      }
      if (n0 + 32u < n) {
        if (full) {
          acc32 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 48u) * n + n0 + 32u, n);
        } else {
          acc32 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(3u, 32u), 64u);
        }
      }
      if (n0 + 48u < n) {
        if (full) {
          acc33 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c, c0 + (m0 + 48u) * n + n0 + 48u, n);
        } else {
          acc33 = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&c_tile, tile_at(3u, 48u), 64u);
        }
      }
    }
  }
  let b0_at = b_row(n0, 0u) * k;
  let b1_at = b_row(n0, 1u) * k;
  let b2_at = b_row(n0, 2u) * k;
  let b3_at = b_row(n0, 3u) * k;
  let a0_at = (m0 + 0u) * k;
  let a1_at = (m0 + 16u) * k;
  let a2_at = (m0 + 32u) * k;
  let a3_at = (m0 + 48u) * k;
  // the first slice's matrices (rows past MT load tile row 0 again: never used)
  var b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b, b0_at + k_beg, k);
  var b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b, b1_at + k_beg, k);
  var b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b, b2_at + k_beg, k);
  var b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b, b3_at + k_beg, k);
  var a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a0_at + k_beg, k);
  var a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, select(a0_at, a1_at, MT > 1u) + k_beg, k);
  var a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, select(a0_at, a2_at, MT > 2u) + k_beg, k);
  var a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, select(a0_at, a3_at, MT > 3u) + k_beg, k);
  for (var k0 = k_beg; k0 < k_end; k0 += 16u) {
    let cb0 = b0;
    let cb1 = b1;
    let cb2 = b2;
    let cb3 = b3;
    let ca0 = a0;
    let ca1 = a1;
    let ca2 = a2;
    let ca3 = a3;
    // the next slice (the last one loads itself again: in cache, and never used)
    let kn = min(k0 + 16u, k_end - 16u);
    b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b, b0_at + kn, k);
    b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b, b1_at + kn, k);
    b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b, b2_at + kn, k);
    b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&b, b3_at + kn, k);
    a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a0_at + kn, k);
    if (MT > 1u) {
      a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a1_at + kn, k);
    }
    if (MT > 2u) {
      a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a2_at + kn, k);
    }
    if (MT > 3u) {
      a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&a, a3_at + kn, k);
    }
    acc00 = subgroupMatrixMultiplyAccumulate(ca0, cb0, acc00);
    acc01 = subgroupMatrixMultiplyAccumulate(ca0, cb1, acc01);
    acc02 = subgroupMatrixMultiplyAccumulate(ca0, cb2, acc02);
    acc03 = subgroupMatrixMultiplyAccumulate(ca0, cb3, acc03);
    if (MT > 1u) {
      acc10 = subgroupMatrixMultiplyAccumulate(ca1, cb0, acc10);
      acc11 = subgroupMatrixMultiplyAccumulate(ca1, cb1, acc11);
      acc12 = subgroupMatrixMultiplyAccumulate(ca1, cb2, acc12);
      acc13 = subgroupMatrixMultiplyAccumulate(ca1, cb3, acc13);
    }
    if (MT > 2u) {
      acc20 = subgroupMatrixMultiplyAccumulate(ca2, cb0, acc20);
      acc21 = subgroupMatrixMultiplyAccumulate(ca2, cb1, acc21);
      acc22 = subgroupMatrixMultiplyAccumulate(ca2, cb2, acc22);
      acc23 = subgroupMatrixMultiplyAccumulate(ca2, cb3, acc23);
    }
    if (MT > 3u) {
      acc30 = subgroupMatrixMultiplyAccumulate(ca3, cb0, acc30);
      acc31 = subgroupMatrixMultiplyAccumulate(ca3, cb1, acc31);
      acc32 = subgroupMatrixMultiplyAccumulate(ca3, cb2, acc32);
      acc33 = subgroupMatrixMultiplyAccumulate(ca3, cb3, acc33);
    }
  }
  if (full) {
    if (n0 + 0u < n) {
      subgroupMatrixStore<row_major>(&c, c0 + (m0 + 0u) * n + n0 + 0u, acc00, n);
    }
    if (n0 + 16u < n) {
      subgroupMatrixStore<row_major>(&c, c0 + (m0 + 0u) * n + n0 + 16u, acc01, n);
    }
    if (n0 + 32u < n) {
      subgroupMatrixStore<row_major>(&c, c0 + (m0 + 0u) * n + n0 + 32u, acc02, n);
    }
    if (n0 + 48u < n) {
      subgroupMatrixStore<row_major>(&c, c0 + (m0 + 0u) * n + n0 + 48u, acc03, n);
    }
    if (MT > 1u) {
      if (n0 + 0u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 16u) * n + n0 + 0u, acc10, n);
      }
      if (n0 + 16u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 16u) * n + n0 + 16u, acc11, n);
      }
      if (n0 + 32u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 16u) * n + n0 + 32u, acc12, n);
      }
      if (n0 + 48u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 16u) * n + n0 + 48u, acc13, n);
      }
    }
    if (MT > 2u) {
      if (n0 + 0u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 32u) * n + n0 + 0u, acc20, n);
      }
      if (n0 + 16u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 32u) * n + n0 + 16u, acc21, n);
      }
      if (n0 + 32u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 32u) * n + n0 + 32u, acc22, n);
      }
      if (n0 + 48u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 32u) * n + n0 + 48u, acc23, n);
      }
    }
    if (MT > 3u) {
      if (n0 + 0u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 48u) * n + n0 + 0u, acc30, n);
      }
      if (n0 + 16u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 48u) * n + n0 + 16u, acc31, n);
      }
      if (n0 + 32u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 48u) * n + n0 + 32u, acc32, n);
      }
      if (n0 + 48u < n) {
        subgroupMatrixStore<row_major>(&c, c0 + (m0 + 48u) * n + n0 + 48u, acc33, n);
      }
    }
    return;
  }
  // the last row block: through c_tile, only the rows of c stored
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&c_tile, tile_at(0u, 0u), acc00, 64u);
  subgroupMatrixStore<row_major>(&c_tile, tile_at(0u, 16u), acc01, 64u);
  subgroupMatrixStore<row_major>(&c_tile, tile_at(0u, 32u), acc02, 64u);
  subgroupMatrixStore<row_major>(&c_tile, tile_at(0u, 48u), acc03, 64u);
  if (MT > 1u) {
    subgroupMatrixStore<row_major>(&c_tile, tile_at(1u, 0u), acc10, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(1u, 16u), acc11, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(1u, 32u), acc12, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(1u, 48u), acc13, 64u);
  }
  if (MT > 2u) {
    subgroupMatrixStore<row_major>(&c_tile, tile_at(2u, 0u), acc20, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(2u, 16u), acc21, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(2u, 32u), acc22, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(2u, 48u), acc23, 64u);
  }
  if (MT > 3u) {
    subgroupMatrixStore<row_major>(&c_tile, tile_at(3u, 0u), acc30, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(3u, 16u), acc31, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(3u, 32u), acc32, 64u);
    subgroupMatrixStore<row_major>(&c_tile, tile_at(3u, 48u), acc33, 64u);
  }
  workgroupBarrier();
  for (var e = lid; e < 16u * MT * 64u; e += 32u) {
    let r = m0 + e / 64u;
    let col = n0 + e % 64u;
    if (r < params.m && col < n) {
      c[c0 + r * n + col] = c_tile[e];
    }
  }
}
