// Grouped gate/up GEMM with the SwiGLU epilogue, one workgroup per (32 act columns,
// work item): for the work item's rows r (expert e, rows sorted by expert),
//   act[r, c] = silu(x[tok(r), :] . w[e, c, :]) * (x[tok(r), :] . w[e, inter + c, :])
// The weight tile holds the 32 gate rows and the 32 matching up rows, so both dot
// products of an act column end in the same invocation and only act is written.
// Token rows are gathered through sorted_token while loading (no gathered copy).
// 256 invocations, each 4 rows x (2 gate + 2 up) columns; BK 16 (4 vec4); rows beyond
// 64 in a work item loop, reusing the weight tile from cache.
// Bytes: each touched expert's weights once per work item (2 * inter * hidden * sizeof T),
// rows * hidden * 4 gathered, rows * inter * 4 written.
var<workgroup> a_tile: array<f32, 1024>; // [BK=16][64 rows]
var<workgroup> b_tile: array<f32, 1024>; // [BK=16][32 gate | 32 up]

@compute @workgroup_size(256)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let item = wid.y + wid.z * nwg.y;
  if (item >= min(work_items[0].x, params.max_items)) {
    return;
  }
  let info = work_items[1u + item];
  let e = info.x;
  let row_end = info.z;
  let inter = params.inter;
  let k4 = params.hidden / 4u;
  let c0 = wid.x * 32u;
  let tx = lid % 16u;
  let ty = lid / 16u;
  // Loader: invocation lid loads vec4 kv of tile row lr (of a and of b).
  let lr = lid / 4u;
  let kv = lid % 4u;
  let wcol = c0 + lr % 32u;
  let w_valid = wcol < inter;
  var wrow = e * 2u * inter + wcol;
  if (lr >= 32u) {
    wrow += inter;
  }
  for (var r0 = info.y; r0 < row_end; r0 += 64u) {
    let arow = r0 + lr;
    let a_valid = arow < row_end;
    var tok = 0u;
    if (a_valid) {
      tok = sorted_token[arow];
    }
    var acc = array<f32, 16>();
    for (var k0 = 0u; k0 < k4; k0 += 4u) {
      var av = vec4<f32>(0.0);
      if (a_valid && k0 + kv < k4) {
        av = x[tok * k4 + k0 + kv];
      }
      var bv = vec4<f32>(0.0);
      if (w_valid && k0 + kv < k4) {
        bv = vec4<f32>(w[wrow * k4 + k0 + kv]);
      }
      for (var c = 0u; c < 4u; c++) {
        a_tile[(kv * 4u + c) * 64u + lr] = av[c];
        b_tile[(kv * 4u + c) * 64u + lr] = bv[c];
      }
      workgroupBarrier();
      for (var kk = 0u; kk < 16u; kk++) {
        let a4 = vec4<f32>(
          a_tile[kk * 64u + ty * 4u],
          a_tile[kk * 64u + ty * 4u + 1u],
          a_tile[kk * 64u + ty * 4u + 2u],
          a_tile[kk * 64u + ty * 4u + 3u],
        );
        let b4 = vec4<f32>(
          b_tile[kk * 64u + tx * 2u],
          b_tile[kk * 64u + tx * 2u + 1u],
          b_tile[kk * 64u + 32u + tx * 2u],
          b_tile[kk * 64u + 32u + tx * 2u + 1u],
        );
        for (var i = 0u; i < 4u; i++) {
          for (var j = 0u; j < 4u; j++) {
            acc[i * 4u + j] += a4[i] * b4[j];
          }
        }
      }
      workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
      let r = r0 + ty * 4u + i;
      for (var j = 0u; j < 2u; j++) {
        let col = c0 + tx * 2u + j;
        if (r < row_end && col < inter) {
          let g = acc[i * 4u + j];
          act[r * inter + col] = g / (1.0 + exp(-g)) * acc[i * 4u + 2u + j];
        }
      }
    }
  }
}
