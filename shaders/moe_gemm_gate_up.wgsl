// Grouped gate/up GEMM with the SwiGLU epilogue, one workgroup per (64 act columns,
// work item): for the work item's rows r (expert e, rows sorted by expert),
//   act[r, c] = silu(x[tok(r), :] . w[e, c, :]) * (x[tok(r), :] . w[e, inter + c, :])
// The weight tile holds the 64 gate rows and the 64 matching up rows, so both dot
// products of an act column end in the same invocation and only act is written.
// Token rows are gathered through sorted_token while loading (no gathered copy).
// Tile: 64 rows x 128 weight rows (64 gate | 64 up), BK 16; rows beyond 64 in a work item
// loop, reusing the weight tile from cache. 128 invocations in an 8 x 16 grid (ty, tx),
// each 8 rows x (4 gate + 4 up) columns = 8 rows x 4 act columns (64 f32 accumulators,
// as 16 vec4): rows 8ty..8ty+7, gate columns 4tx..4tx+3 and the same up columns.
// Workgroup memory (12 KiB): both tiles k-major as vec4s of 4 consecutive rows,
// a_tile [16 k][16 row groups], b_tile [16 k][32 row groups], the row-group slot XORed
// with 2 * (k / 4). Per k an invocation reads 2 vec4 of a and 2 of b for 64 FMAs (16 FMAs
// a read). Two barriers per 16 k (1024 FMAs an invocation, 131072 a workgroup).
// Loads: vec4 (x and w are vec4 bindings): each invocation loads a 4-row x 4-k block of w
// (4 vec4 loads; a subgroup covers 8 rows x 16 k per load) and the first 64 one of x,
// transposes it in registers and stores 4 whole vec4s (no bank conflict in any 8 lanes).
// The next tile's loads are issued before the current tile's FMAs (register prefetch).
// Bytes: each touched expert's weights once per work item (2 * inter * hidden * sizeof T),
// rows * hidden * 4 gathered, rows * inter * 4 written.
//#include "lib/tile_64x128.wgsl"
//#include "lib/moe_work_item.wgsl"
//#include "lib/expert_tiles.wgsl"

// The tiles' row-group slot XOR at k, as this shader stores them.
fn tile_swizzle(k: u32) -> u32 {
  return 2u * (k / 4u);
}

// Column 4 * kq..+3 of the 4 weight rows from w row wrow, the buffer one matrix of experts x
// rows, row by row or in tiles (lib/expert_tiles.wgsl) (0 beyond inter or hidden).
fn load_w(wrow: u32, valid: bool, kq: u32, k4: u32) -> array<vec4<T>, 4> {
  var v = array<vec4<T>, 4>();
  if (valid && kq < k4) {
    v[0] = w[tile_row(wrow, 4u * k4) / 4u + tile_quad(kq)];
    v[1] = w[tile_row(wrow + 1u, 4u * k4) / 4u + tile_quad(kq)];
    v[2] = w[tile_row(wrow + 2u, 4u * k4) / 4u + tile_quad(kq)];
    v[3] = w[tile_row(wrow + 3u, 4u * k4) / 4u + tile_quad(kq)];
  }
  return v;
}

// Column 4 * kq..+3 of the 4 token rows tok (rows beyond the work item: 0).
fn load_x(tok: vec4<u32>, valid: vec4<bool>, kq: u32, k4: u32) -> array<vec4<f32>, 4> {
  var v = array<vec4<f32>, 4>();
  if (kq < k4) {
    if (valid.x) {
      v[0] = x[tok.x * k4 + kq];
    }
    if (valid.y) {
      v[1] = x[tok.y * k4 + kq];
    }
    if (valid.z) {
      v[2] = x[tok.z * k4 + kq];
    }
    if (valid.w) {
      v[3] = x[tok.w * k4 + kq];
    }
  }
  return v;
}

@compute @workgroup_size(128)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let info = moe_work_item(wid, nwg);
  if (info.x == NO_ITEM) {
    return;
  }
  let e = info.x;
  let row_end = info.z;
  let inter = params.inter;
  let k4 = params.hidden / 4u;
  let c0 = wid.x * 64u;
  let tx = lid % 16u;
  let ty = lid / 16u;
  // Loader: vec4 column kv of the k tile for row group lg (tile rows 4lg..4lg+3); lg < 16
  // is gate columns c0 + 4lg.., lg >= 16 the matching up columns; lg < 16 also loads x.
  let kv = lid % 4u;
  let lg = lid / 4u;
  let ls = lg ^ (2u * kv); // swizzled slot of group lg at k = 4kv..4kv+3
  let a_loader = lg < 16u;
  let wcol = c0 + 4u * (lg % 16u);
  let w_valid = wcol < inter; // inter % 4 == 0: all 4 rows or none
  var wrow = e * 2u * inter + wcol;
  if (lg >= 16u) {
    wrow += inter;
  }
  for (var r0 = info.y; r0 < row_end; r0 += 64u) {
    var tok = vec4<u32>(0u);
    var a_valid = vec4<bool>(false);
    if (a_loader) {
      for (var c = 0u; c < 4u; c++) {
        let r = r0 + 4u * lg + c;
        if (r < row_end) {
          tok[c] = sorted_token[r];
          a_valid[c] = true;
        }
      }
    }
    var pa = load_x(tok, a_valid, kv, k4);
    var pb = load_w(wrow, w_valid, kv, k4);
    var acc = array<vec4<f32>, 16>(); // [row i][gate | up] at 2i + h
    for (var t = 0u; t < k4; t += 4u) {
      for (var j = 0u; j < 4u; j++) {
        let at = (4u * kv + j) * 16u;
        b_tile[2u * at + ls] = vec4<f32>(vec4<T>(pb[0][j], pb[1][j], pb[2][j], pb[3][j]));
        if (a_loader) {
          a_tile[at + ls] = vec4<f32>(pa[0][j], pa[1][j], pa[2][j], pa[3][j]);
        }
      }
      workgroupBarrier();
      pa = load_x(tok, a_valid, t + 4u + kv, k4);
      pb = load_w(wrow, w_valid, t + 4u + kv, k4);
      tile_fma(&acc, tx, ty);
      workgroupBarrier();
    }
    let col = c0 + 4u * tx;
    if (col < inter) {
      for (var i = 0u; i < 8u; i++) {
        let r = r0 + 8u * ty + i;
        if (r < row_end) {
          let g = acc[2u * i];
          let a4 = g / (1.0 + exp(-g)) * acc[2u * i + 1u];
          let at = r * inter + col;
          act[at] = a4.x;
          act[at + 1u] = a4.y;
          act[at + 2u] = a4.z;
          act[at + 3u] = a4.w;
        }
      }
    }
  }
}
