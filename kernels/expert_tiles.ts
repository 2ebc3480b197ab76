/**
 * MoE expert weights in tiles: each expert matrix [rows, cols] stored as bands of 16 rows, a
 * band as its tiles of 64 columns one after another, a tile (16 x 64, 2 KB of f16) row by row.
 * A band covers the same bytes as its 16 rows stored row by row (so each expert's gate, up and
 * down matrices keep their places); only the order inside a band differs. A step of the
 * staged decode GEMMs (moe_gemm_*_tcs: 16 or 32 rows x 64 columns) then reads 2 KB runs instead
 * of 128-byte runs a row apart. On the H200 (2026-12-01, lab copies of those GEMMs reading
 * their weights so) that took gate/up from 62% to 66% of the read roof and down from 54% to
 * 57%: 64 x 1024 decode steps 30.33 -> 29.12 ms in one call, 64 x 8192 42.94 against 44.09 in
 * an earlier call.
 * lib/expert_tiles.wgsl is the shader side.
 *
 * ```ts
 * const tiled = tileExpertMatrices(w, 2 * inter, hidden); // w: [experts, 2 * inter, hidden]
 * tiledIndex(17, 70, hidden); // where row 17, column 70 of an expert matrix lies in its tiles
 * ```
 */
import type { Variant } from "./kernel.ts";

export const EXPERT_TILE_ROWS = 16;
export const EXPERT_TILE_COLS = 64;

/** Whether matrices of `rows` x `cols` can be stored in tiles. */
export function expertTilesFit(rows: number, cols: number): boolean {
  return rows > 0 && cols > 0 && rows % EXPERT_TILE_ROWS === 0 && cols % EXPERT_TILE_COLS === 0;
}

/** The element index of (row, col) of one tiled matrix of `cols` columns. */
export function tiledIndex(row: number, col: number, cols: number): number {
  const band = Math.floor(row / EXPERT_TILE_ROWS), r = row % EXPERT_TILE_ROWS;
  const tile = Math.floor(col / EXPERT_TILE_COLS), c = col % EXPERT_TILE_COLS;
  return (band * (cols / EXPERT_TILE_COLS) + tile) * EXPERT_TILE_ROWS * EXPERT_TILE_COLS +
    r * EXPERT_TILE_COLS + c;
}

/**
 * Whether a MoE block's expert weights can be stored in tiles: gate/up [2 * inter, hidden] with
 * the up rows starting a band, and down [hidden, inter].
 */
export function moeExpertsFitTiles(hidden: number, inter: number): boolean {
  return expertTilesFit(hidden, inter) && expertTilesFit(inter, hidden);
}

/** Row-by-row matrices [n, rows, cols] (n from the length) in tiles; throws where they do not fit. */
export function tileExpertMatrices<A extends Float32Array | Uint16Array>(
  data: A,
  rows: number,
  cols: number,
): A {
  const size = rows * cols;
  if (!expertTilesFit(rows, cols) || data.length % size !== 0) {
    throw new Error(
      `expert tiles: ${data.length} values are not whole ${rows} x ${cols} matrices of ` +
        `multiples of ${EXPERT_TILE_ROWS} rows and ${EXPERT_TILE_COLS} columns`,
    );
  }
  const out = new (data.constructor as { new (n: number): A })(data.length);
  for (let m = 0; m < data.length; m += size) {
    for (let row = 0; row < rows; row++) {
      for (let col = 0; col < cols; col += EXPERT_TILE_COLS) {
        const to = m + tiledIndex(row, col, cols);
        out.set(data.subarray(m + row * cols + col, m + row * cols + col + EXPERT_TILE_COLS), to);
      }
    }
  }
  return out;
}

/** The form of `v` that reads its expert weights in tiles (`-t16` after its name). */
export function tiledVariant(v: Variant): Variant {
  return { ...v, name: `${v.name}-t16`, expertTiles: true };
}
