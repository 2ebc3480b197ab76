// y[m, n] (+)= sum_k x[m, k] * w[n, k] for a handful of rows (decode batches): one
// workgroup per (RPW weight rows, RMAX x rows). The x rows are staged in workgroup memory
// KC values at a time; KP invocations share a weight row and stream it once per row block
// with vec4 loads, applying every loaded weight to all staged x rows. The KP partial sums
// meet in the same workgroup memory afterwards, behind a single barrier. No subgroups.
const RM4: u32 = RMAX / 4u;
// Staged x [row][k / 4], then the partial sums [invocation][row / 4].
var<workgroup> shm: array<vec4<f32>, max(RMAX * KC / 4u, WG * RM4)>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let m0 = wid.y * RMAX;
  let nr = min(RMAX, params.m - m0);
  let k4 = params.k / 4u;
  let kc4 = KC / 4u;
  let kp = lid % KP;
  let row = wid.x * RPW + lid / KP;
  let valid = row < params.n;
  let wrow = min(row, params.n - 1u) * k4;
  var acc = array<f32, RMAX>();
  for (var k0 = 0u; k0 < k4; k0 += kc4) {
    let nk = min(kc4, k4 - k0);
    for (var i = lid; i < RMAX * kc4; i += WG) {
      let r = i / kc4;
      let kk = i % kc4;
      var v = vec4<f32>(0.0);
      if (r < nr && kk < nk) {
        v = x[(m0 + r) * k4 + k0 + kk];
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
          let at = (m0 + r) * params.n + row;
          y[at] = select(s[c], y[at] + s[c], params.accumulate != 0u);
        }
      }
    }
  }
}
