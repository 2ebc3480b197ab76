// Tree sum over a workgroup of WG invocations (WG a power of two). Every invocation of
// the workgroup must call it (uniform control flow); all get the total.
var<workgroup> wg_sum_scratch: array<f32, WG>;

fn workgroup_sum(value: f32, lid: u32) -> f32 {
  wg_sum_scratch[lid] = value;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
    if (lid < stride) {
      wg_sum_scratch[lid] = wg_sum_scratch[lid] + wg_sum_scratch[lid + stride];
    }
    workgroupBarrier();
  }
  let total = wg_sum_scratch[0];
  workgroupBarrier();
  return total;
}
