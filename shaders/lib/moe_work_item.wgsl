// The work item of a grouped expert GEMM's workgroup: items run along grid y, then z; item i
// is work_items[1 + i] = (expert, first row, row end) of the expert-sorted rows, as
// moe_dispatch writes them (work_items[0].x: how many). Needs the `work_items` binding and
// params.max_items.
const NO_ITEM: u32 = 0xffffffffu;

// This workgroup's item index along grid y, then z.
fn moe_item_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return wid.y + wid.z * nwg.y;
}

// This workgroup's index in the grid (x fastest, then its item): one slot each of a
// per-workgroup scratch (the staged decode forms' `tile`, MOE_TC_TILE).
fn moe_workgroup_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return wid.x + nwg.x * moe_item_index(wid, nwg);
}

// This workgroup's item, or x = NO_ITEM past the step's items (the workgroup returns then).
// The item's words are loaded beside the count, before the count is compared (a slot within
// max_items either way), so the workgroup waits one round trip for its expert, not two. On the
// H200 (session 41, three processes each in turn against the count compared first) 32 x 1024
// decode steps took 21.54-21.62 ms against 21.92-22.00, 64 x 1024 25.89-25.94 against
// 25.98-26.01 and 128 x 1024 31.14-31.17 against 31.22-31.30.
fn moe_work_item(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
  let item = moe_item_index(wid, nwg);
  let count = work_items[0].x;
  let words = work_items[1u + min(item, max(params.max_items, 1u) - 1u)];
  if (item >= min(count, params.max_items)) {
    return vec4<u32>(NO_ITEM);
  }
  return words;
}
