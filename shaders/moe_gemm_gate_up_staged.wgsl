// Grouped gate/up GEMM with the SwiGLU epilogue, decode-shaped, no subgroup operations:
// one workgroup per (RPW act columns, work item). The item's token rows (RMAX at a time)
// are staged into workgroup memory KC values at a time, gathered through sorted_token;
// KP invocations share a column and stream its gate row and up row of w[e] once with
// vec4 loads, applying every loaded weight to all staged rows; the KP partial sums meet
// in the same workgroup memory behind a single barrier.
//   act[r, c] = silu(x[tok(r)] . w[e, c]) * (x[tok(r)] . w[e, inter + c])
//#include "lib/moe_work_item.wgsl"
const RM4: u32 = RMAX / 4u;
// Staged x [row][k / 4], then the partial sums [invocation][gate rows / 4, up rows / 4].
var<workgroup> shm: array<vec4<f32>, max(RMAX * KC / 4u, 2u * WG * RM4)>;

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
  let inter = params.inter;
  let k4 = params.hidden / 4u;
  let kc4 = KC / 4u;
  let kp = lid % KP;
  let col = wid.x * RPW + lid / KP;
  let valid = col < inter;
  let grow = (e * 2u * inter + min(col, inter - 1u)) * k4;
  let urow = grow + inter * k4;
  for (var r0 = info.y; r0 < row_end; r0 += RMAX) {
    let nr = min(RMAX, row_end - r0);
    var acc_g = array<f32, RMAX>();
    var acc_u = array<f32, RMAX>();
    for (var k0 = 0u; k0 < k4; k0 += kc4) {
      let nk = min(kc4, k4 - k0);
      for (var i = lid; i < RMAX * kc4; i += WG) {
        let r = i / kc4;
        let kk = i % kc4;
        var v = vec4<f32>(0.0);
        if (r < nr && kk < nk) {
          v = x[sorted_token[r0 + r] * k4 + k0 + kk];
        }
        shm[i] = v;
      }
      workgroupBarrier();
      if (valid) {
        for (var kk = kp; kk < nk; kk += KP) {
          let wg = t4(w[grow + k0 + kk]);
          let wu = t4(w[urow + k0 + kk]);
          for (var r = 0u; r < RMAX; r++) {
            let xv = shm[r * kc4 + kk];
            acc_g[r] += dot(xv, wg);
            acc_u[r] += dot(xv, wu);
          }
        }
      }
      workgroupBarrier();
    }
    for (var q = 0u; q < RM4; q++) {
      shm[lid * 2u * RM4 + q] = vec4<f32>(acc_g[4u * q], acc_g[4u * q + 1u], acc_g[4u * q + 2u], acc_g[4u * q + 3u]);
      shm[lid * 2u * RM4 + RM4 + q] = vec4<f32>(acc_u[4u * q], acc_u[4u * q + 1u], acc_u[4u * q + 2u], acc_u[4u * q + 3u]);
    }
    workgroupBarrier();
    if (kp == 0u && valid) {
      for (var q = 0u; q < RM4; q++) {
        var g = vec4<f32>(0.0);
        var u = vec4<f32>(0.0);
        for (var t = 0u; t < KP; t++) {
          g += shm[(lid + t) * 2u * RM4 + q];
          u += shm[(lid + t) * 2u * RM4 + RM4 + q];
        }
        let a = g / (vec4<f32>(1.0) + exp(-g)) * u;
        for (var c = 0u; c < 4u; c++) {
          let r = 4u * q + c;
          if (r < nr) {
            act[(r0 + r) * inter + col] = a[c];
          }
        }
      }
    }
    workgroupBarrier();
  }
}
