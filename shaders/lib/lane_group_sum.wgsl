// Sum over a lane group: LG consecutive invocations of one subgroup (LG a power of two, at
// most the subgroup size). Every lane of the group must call it; all get the group's total.
// Assumes subgroups are runs of consecutive invocations (lane = lid % subgroup size), which
// the device is probed for when it is opened (src/gpu/subgroup_layout.ts); variants that
// include this declare minSubgroupSize, and devices without that layout never run them.
fn lane_group_sum(value: f32) -> f32 {
  var s = value;
  for (var m = 1u; m < LG; m = m << 1u) {
    s += subgroupShuffleXor(s, m);
  }
  return s;
}
