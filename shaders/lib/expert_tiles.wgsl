// Where an element of a MoE expert weight matrix lies: row by row, or, where the prelude's
// EXPERT_TILES is true, in tiles (kernels/expert_tiles.ts: bands of 16 rows, a band's 64-column
// tiles one after another, a tile row by row). A band takes the bytes of its 16 rows either
// way, so 16 rows further on is 16 * cols further on in both.

// The element index of (row, 0) of one expert matrix of `cols` columns.
fn tile_row(row: u32, cols: u32) -> u32 {
  if (EXPERT_TILES) {
    return (row / 16u) * 16u * cols + (row % 16u) * 64u;
  }
  return row * cols;
}

// The element offset of column `col` from its row's tile_row.
fn tile_col(col: u32) -> u32 {
  if (EXPERT_TILES) {
    return (col / 64u) * 1024u + col % 64u;
  }
  return col;
}

// The row stride of a 16 x 16 block starting on a multiple of 16 rows and columns (the
// subgroup-matrix loads of the forms that load straight from storage).
fn tile_stride(cols: u32) -> u32 {
  return select(cols, 64u, EXPERT_TILES);
}

// The offset of a row's 16-byte word `word` (8 f16 a word) from the row's tile_row / 8.
fn tile_word(word: u32) -> u32 {
  if (EXPERT_TILES) {
    return (word / 8u) * 128u + word % 8u;
  }
  return word;
}

// The offset of a row's word `kk` of `vec4s` vec4s of weights (1: a quad, tile_quad; 2: a
// 16-byte word of f16, tile_word) from the row's tile_row / (4 * vec4s).
fn tile_unit(kk: u32, vec4s: u32) -> u32 {
  if (vec4s == 2u) {
    return tile_word(kk);
  }
  return tile_quad(kk);
}

// The offset of a row's vec4 `quad` (4 weights) from the row's tile_row / 4.
fn tile_quad(quad: u32) -> u32 {
  if (EXPERT_TILES) {
    return (quad / 16u) * 256u + quad % 16u;
  }
  return quad;
}
