// y[m, n] (+)= sum_k x[m, k] * w[n, k], one invocation per weight row and no barriers:
// the form that suits CPU adapters (lavapipe), where workgroup barriers are expensive.
@compute @workgroup_size(WG)
fn main(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let row = gid.x + gid.y * nwg.x * WG;
  if (row >= params.n) {
    return;
  }
  let k4 = params.k / 4u;
  for (var m = 0u; m < params.m; m++) {
    var acc = vec4<f32>(0.0);
    for (var i = 0u; i < k4; i++) {
      acc += x[m * k4 + i] * t4(w[row * k4 + i]);
    }
    let s = acc.x + acc.y + acc.z + acc.w;
    let at = m * params.n + row;
    y[at] = select(s, y[at] + s, params.accumulate != 0u);
  }
}
