// Grouped down GEMM, one workgroup per (128 output columns, work item): for the work
// item's rows r of expert e (expert-sorted, so act rows are read directly),
//   y[r, n] = act[r, :] . w[e, n, :]
// Tile: 64 rows x 128 columns, BK 16; rows beyond 64 in a work item loop, reusing the
// weight tile from cache. 128 invocations in an 8 x 16 grid (ty, tx) each accumulate
// 8 rows x 8 columns (64 f32 registers, as 16 vec4): rows 8ty..8ty+7, columns
// 4tx..4tx+3 and 64+4tx..64+4tx+3 (two vec4 halves: no bank conflict on b reads).
// Workgroup memory (12 KiB): both tiles k-major as vec4s of 4 consecutive rows,
// a_tile [16 k][16 row groups], b_tile [16 k][32 row groups], the row-group slot XORed
// with 2 * (k / 4). Per k an invocation reads 2 vec4 of a and 2 of b for 64 FMAs (16 FMAs
// a read). Two barriers per 16 k (1024 FMAs an invocation, 131072 a workgroup).
// Loads: vec4 (act and w are vec4 bindings): each invocation loads a 4-row x 4-k block of
// w (4 vec4 loads; a subgroup covers 8 rows x 16 k per load) and the first 64 one of act,
// transposes it in registers and stores 4 whole vec4s (no bank conflict in any 8 lanes).
// The next tile's loads are issued before the current tile's FMAs (register prefetch).
// Bytes: each touched expert's weights once per work item (hidden * inter * sizeof T),
// rows * inter * 4 read, rows * hidden * 4 written.
//#include "lib/tile_64x128.wgsl"
//#include "lib/moe_work_item.wgsl"
//#include "lib/expert_tiles.wgsl"

// The tiles' row-group slot XOR at k, as this shader stores them.
fn tile_swizzle(k: u32) -> u32 {
  return 2u * (k / 4u);
}

// Column 4 * kq..+3 of the 4 weight rows from w row wrow, the buffer one matrix of experts x
// rows, row by row or in tiles (lib/expert_tiles.wgsl) (0 beyond hidden or inter).
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

// Column 4 * kq..+3 of act rows r..r+3 (0 from row_end or k4 on).
fn load_act(r: u32, row_end: u32, kq: u32, k4: u32) -> array<vec4<f32>, 4> {
  var v = array<vec4<f32>, 4>();
  if (kq < k4) {
    if (r < row_end) {
      v[0] = act[r * k4 + kq];
    }
    if (r + 1u < row_end) {
      v[1] = act[(r + 1u) * k4 + kq];
    }
    if (r + 2u < row_end) {
      v[2] = act[(r + 2u) * k4 + kq];
    }
    if (r + 3u < row_end) {
      v[3] = act[(r + 3u) * k4 + kq];
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
  let hidden = params.hidden;
  let k4 = params.inter / 4u;
  let n0 = wid.x * 128u;
  let tx = lid % 16u;
  let ty = lid / 16u;
  // Loader: vec4 column kv of the k tile for row group lg (tile rows 4lg..4lg+3) of w;
  // lg < 16 also loads act rows 4lg..4lg+3.
  let kv = lid % 4u;
  let lg = lid / 4u;
  let ls = lg ^ (2u * kv); // swizzled slot of group lg at k = 4kv..4kv+3
  let a_loader = lg < 16u;
  let w_valid = n0 + 4u * lg < hidden; // hidden % 4 == 0: all 4 rows or none
  let wrow = e * hidden + n0 + 4u * lg;
  for (var r0 = info.y; r0 < row_end; r0 += 64u) {
    // Rows of the loader's a group; none for the invocations that load only w.
    let ar = r0 + 4u * lg;
    let a_end = select(0u, row_end, a_loader);
    var pa = load_act(ar, a_end, kv, k4);
    var pb = load_w(wrow, w_valid, kv, k4);
    var acc = array<vec4<f32>, 16>(); // [row i][half h] at 2i + h
    for (var t = 0u; t < k4; t += 4u) {
      for (var j = 0u; j < 4u; j++) {
        let at = (4u * kv + j) * 16u;
        b_tile[2u * at + ls] = vec4<f32>(vec4<T>(pb[0][j], pb[1][j], pb[2][j], pb[3][j]));
        if (a_loader) {
          a_tile[at + ls] = vec4<f32>(pa[0][j], pa[1][j], pa[2][j], pa[3][j]);
        }
      }
      workgroupBarrier();
      pa = load_act(ar, a_end, t + 4u + kv, k4);
      pb = load_w(wrow, w_valid, t + 4u + kv, k4);
      tile_fma(&acc, tx, ty);
      workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
      let r = r0 + 8u * ty + i;
      if (r < row_end) {
        for (var h = 0u; h < 2u; h++) {
          let col = n0 + 64u * h + 4u * tx;
          if (col < hidden) {
            let v = acc[2u * i + h];
            let at = r * hidden + col;
            y[at] = v.x;
            y[at + 1u] = v.y;
            y[at + 2u] = v.z;
            y[at + 3u] = v.w;
          }
        }
      }
    }
  }
}
