// c[i] (+)= sum over s of part[s * count + i] (+= when params.accumulate): the splits of a
// split-K GEMM added up, in split order.
@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let i = (wid.x + wid.y * nwg.x) * WG + lid;
  if (i >= params.count) {
    return;
  }
  var sum = select(0.0, c[i], params.accumulate != 0u);
  for (var s = 0u; s < params.splits; s++) {
    sum += part[s * params.count + i];
  }
  c[i] = sum;
}
