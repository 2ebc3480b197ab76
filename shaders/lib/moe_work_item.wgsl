// The work item of a grouped expert GEMM's workgroup: items run along grid y, then z; item i
// is work_items[1 + i] = (expert, first row, row end) of the expert-sorted rows, as
// moe_dispatch writes them (work_items[0].x: how many). Needs the `work_items` binding and
// params.max_items.
const NO_ITEM: u32 = 0xffffffffu;

// This workgroup's item index along grid y, then z.
fn moe_item_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return wid.y + wid.z * nwg.y;
}

// Floats of a workgroup's slot of the staged decode forms' `tile` (MOE_TC_TILE): a 16 x 32 tile.
const MOE_TC_SLOT: u32 = 512u;

// This workgroup's index in the grid (x fastest, then its item): one slot each of a
// per-workgroup scratch (the staged decode forms' `tile`, MOE_TC_TILE).
fn moe_workgroup_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return wid.x + nwg.x * moe_item_index(wid, nwg);
}

// This workgroup's item, or x = NO_ITEM past the step's items (the workgroup returns then).
fn moe_work_item(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
  let item = moe_item_index(wid, nwg);
  if (item >= min(work_items[0].x, params.max_items)) {
    return vec4<u32>(NO_ITEM);
  }
  return work_items[1u + item];
}
