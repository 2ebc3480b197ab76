// Tree max over a workgroup of WG invocations (WG a power of two); see workgroup_sum.
var<workgroup> wg_max_scratch: array<f32, WG>;

fn workgroup_max(value: f32, lid: u32) -> f32 {
  wg_max_scratch[lid] = value;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
    if (lid < stride) {
      wg_max_scratch[lid] = max(wg_max_scratch[lid], wg_max_scratch[lid + stride]);
    }
    workgroupBarrier();
  }
  let total = wg_max_scratch[0];
  workgroupBarrier();
  return total;
}
