// Grouped down GEMM, decode-shaped, no subgroup operations: one workgroup per (RPW output
// columns, work item). The item's act rows (RMAX at a time, expert-sorted) are staged into
// workgroup memory KC values at a time; KP invocations share an output column and stream
// its row of w[e] once with vec4 loads, applying every loaded weight to all staged rows;
// the KP partial sums meet in the same workgroup memory behind a single barrier.
//   y[r, c] = act[r] . w[e, c]
//#include "lib/moe_work_item.wgsl"
const RM4: u32 = RMAX / 4u;
// Staged act [row][k / 4], then the partial sums [invocation][row / 4].
var<workgroup> shm: array<vec4<f32>, max(RMAX * KC / 4u, WG * RM4)>;

@compute @workgroup_size(WG)
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
  let kc4 = KC / 4u;
  let kp = lid % KP;
  let col = wid.x * RPW + lid / KP;
  let valid = col < hidden;
  let wrow = (e * hidden + min(col, hidden - 1u)) * k4;
  for (var r0 = info.y; r0 < row_end; r0 += RMAX) {
    let nr = min(RMAX, row_end - r0);
    var acc = array<f32, RMAX>();
    for (var k0 = 0u; k0 < k4; k0 += kc4) {
      let nk = min(kc4, k4 - k0);
      for (var i = lid; i < RMAX * kc4; i += WG) {
        let r = i / kc4;
        let kk = i % kc4;
        var v = vec4<f32>(0.0);
        if (r < nr && kk < nk) {
          v = act[(r0 + r) * k4 + k0 + kk];
        }
        shm[i] = v;
      }
      workgroupBarrier();
      if (valid) {
        for (var kk = kp; kk < nk; kk += KP) {
          let wv = t4(w[wrow + k0 + kk]);
          for (var r = 0u; r < RMAX; r++) {
            acc[r] += dot(shm[r * kc4 + kk], wv);
          }
        }
      }
      workgroupBarrier();
    }
    for (var q = 0u; q < RM4; q++) {
      shm[lid * RM4 + q] = vec4<f32>(acc[4u * q], acc[4u * q + 1u], acc[4u * q + 2u], acc[4u * q + 3u]);
    }
    workgroupBarrier();
    if (kp == 0u && valid) {
      for (var q = 0u; q < RM4; q++) {
        var s = vec4<f32>(0.0);
        for (var t = 0u; t < KP; t++) {
          s += shm[(lid + t) * RM4 + q];
        }
        for (var c = 0u; c < 4u; c++) {
          let r = 4u * q + c;
          if (r < nr) {
            y[(r0 + r) * hidden + col] = s[c];
          }
        }
      }
    }
    workgroupBarrier();
  }
}
