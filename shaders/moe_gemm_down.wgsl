// Grouped down GEMM, one workgroup per (64 output columns, work item): for the work
// item's rows r of expert e (expert-sorted, so act rows are read directly),
//   y[r, n] = act[r, :] . w[e, n, :]
// 256 invocations, each 4 rows x 4 columns; BK 16 (4 vec4); rows beyond 64 in a work
// item loop, reusing the weight tile from cache.
// Bytes: each touched expert's weights once per work item (hidden * inter * sizeof T),
// rows * inter * 4 read, rows * hidden * 4 written.
var<workgroup> a_tile: array<f32, 1024>; // [BK=16][64 rows]
var<workgroup> b_tile: array<f32, 1024>; // [BK=16][64 columns]

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
  let hidden = params.hidden;
  let k4 = params.inter / 4u;
  let n0 = wid.x * 64u;
  let tx = lid % 16u;
  let ty = lid / 16u;
  let lr = lid / 4u;
  let kv = lid % 4u;
  let w_valid = n0 + lr < hidden;
  let wrow = e * hidden + n0 + lr;
  for (var r0 = info.y; r0 < row_end; r0 += 64u) {
    let a_valid = r0 + lr < row_end;
    var acc = array<f32, 16>();
    for (var k0 = 0u; k0 < k4; k0 += 4u) {
      var av = vec4<f32>(0.0);
      if (a_valid && k0 + kv < k4) {
        av = act[(r0 + lr) * k4 + k0 + kv];
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
          b_tile[kk * 64u + tx * 4u],
          b_tile[kk * 64u + tx * 4u + 1u],
          b_tile[kk * 64u + tx * 4u + 2u],
          b_tile[kk * 64u + tx * 4u + 3u],
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
      for (var j = 0u; j < 4u; j++) {
        let col = n0 + tx * 4u + j;
        if (r < row_end && col < hidden) {
          y[r * hidden + col] = acc[i * 4u + j];
        }
      }
    }
  }
}
