// MoE dispatch's steps in one workgroup (moe_dispatch.wgsl, whose comment says what they
// write), shared with moe_route_dispatch.wgsl, which routes the step's tokens first. The
// including shader binds topk_ids, expert_offsets, sorted_token, row_of, work_items and
// dispatch_args, has params.{tokens, top_k, experts, block_m, grid_x_gate_up, grid_x_down} and
// the consts WG and MAX_E.
//#include "lib/moe_dispatch_args.wgsl"
const NO_EXPERT: u32 = 0xffffffffu;

var<workgroup> expert_count: array<atomic<u32>, MAX_E>;
// assignments before this workgroup's chunk, by expert
var<workgroup> expert_before: array<atomic<u32>, MAX_E>;
var<workgroup> expert_next: array<atomic<u32>, MAX_E>;
var<workgroup> expert_first_item: array<u32, MAX_E>;
// the lanes of the current round holding expert e: bits of words e * MASK_WORDS ..
const MASK_WORDS: u32 = WG / 32u;
const_assert MASK_WORDS * 32u == WG;
var<workgroup> lane_bits: array<atomic<u32>, MAX_E * MASK_WORDS>;
// the offsets' scan: invocation lid takes experts EPT lid .. EPT lid + EPT - 1
const EPT: u32 = MAX_E / WG;
const_assert EPT * WG == MAX_E;
var<workgroup> scan_rows: array<u32, WG>;
var<workgroup> scan_items: array<u32, WG>;

fn expert_of(i: u32) -> u32 {
  let id = topk_ids[i];
  if (id >= 0 && u32(id) < params.experts) {
    return u32(id);
  }
  return NO_EXPERT;
}

// The whole dispatch (steps 1-4 of moe_dispatch.wgsl) for the assignments begin .. end - 1 of
// the step's (a chunk; the whole step where one workgroup dispatches), by every invocation of the
// workgroup (uniform control flow); topk_ids must be complete and visible to the workgroup.
// Every workgroup counts all the assignments (the offsets need every count) and those before its
// chunk (where its rows of each expert start), then ranks its chunk's alone; the chunk that
// starts at 0 writes the offsets, the work items and the indirect args.
fn dispatch_assignments(lid: u32, begin: u32, end: u32) {
  let n = params.tokens * params.top_k;
  let num_e = params.experts;
  let bm = params.block_m;
  for (var e = lid; e < num_e; e += WG) {
    atomicStore(&expert_count[e], 0u);
    atomicStore(&expert_before[e], 0u);
  }
  for (var w = lid; w < num_e * MASK_WORDS; w += WG) {
    atomicStore(&lane_bits[w], 0u);
  }
  workgroupBarrier();
  for (var i = lid; i < n; i += WG) {
    let e = expert_of(i);
    if (e != NO_EXPERT) {
      atomicAdd(&expert_count[e], 1u);
      if (i < begin) {
        atomicAdd(&expert_before[e], 1u);
      }
    }
  }
  workgroupBarrier();
  // exclusive offsets of rows and work items over the experts: each invocation sums its EPT
  // experts, an inclusive scan over the invocations (Hillis-Steele), then its experts' own
  // (where one invocation walking every expert took a step's dispatch about 5 us more)
  var my_rows = 0u;
  var my_items = 0u;
  for (var j = 0u; j < EPT; j++) {
    let e = EPT * lid + j;
    if (e < num_e) {
      let c = atomicLoad(&expert_count[e]);
      my_rows += c;
      my_items += (c + bm - 1u) / bm;
    }
  }
  scan_rows[lid] = my_rows;
  scan_items[lid] = my_items;
  workgroupBarrier();
  for (var off = 1u; off < WG; off *= 2u) {
    var r = scan_rows[lid];
    var it = scan_items[lid];
    if (lid >= off) {
      r += scan_rows[lid - off];
      it += scan_items[lid - off];
    }
    workgroupBarrier();
    scan_rows[lid] = r;
    scan_items[lid] = it;
    workgroupBarrier();
  }
  var row = scan_rows[lid] - my_rows;
  var item = scan_items[lid] - my_items;
  for (var j = 0u; j < EPT; j++) {
    let e = EPT * lid + j;
    if (e < num_e) {
      let c = atomicLoad(&expert_count[e]);
      atomicStore(&expert_next[e], row + atomicLoad(&expert_before[e]));
      if (begin == 0u) {
        expert_offsets[e] = row;
      }
      expert_first_item[e] = item;
      row += c;
      item += (c + bm - 1u) / bm;
    }
  }
  if (lid == WG - 1u && begin == 0u) {
    // row and item are the totals here: the last invocation's experts end the scan
    expert_offsets[num_e] = row;
    work_items[0] = vec4<u32>(item, row, 0u, 0u);
    write_dispatch_args(item);
  }
  workgroupBarrier();
  for (var e = lid; e < num_e && begin == 0u; e += WG) {
    let first = atomicLoad(&expert_next[e]);
    let last = first + atomicLoad(&expert_count[e]);
    var item = 1u + expert_first_item[e];
    for (var r = first; r < last; r += bm) {
      work_items[item] = vec4<u32>(e, r, min(r + bm, last), 0u);
      item++;
    }
  }
  // expert_next is read above before the rounds below advance it.
  workgroupBarrier();
  for (var base = begin; base < end; base += WG) {
    let i = base + lid;
    var e = NO_EXPERT;
    if (i < end) {
      e = expert_of(i);
      if (e == NO_EXPERT) {
        row_of[i] = NO_EXPERT;
      }
    }
    let word = lid / 32u;
    let bit = 1u << (lid % 32u);
    if (e != NO_EXPERT) {
      atomicOr(&lane_bits[e * MASK_WORDS + word], bit);
    }
    workgroupBarrier();
    var rank = 0u;
    var start = 0u;
    if (e != NO_EXPERT) {
      for (var w = 0u; w < word; w++) {
        rank += countOneBits(atomicLoad(&lane_bits[e * MASK_WORDS + w]));
      }
      rank += countOneBits(atomicLoad(&lane_bits[e * MASK_WORDS + word]) & (bit - 1u));
      start = atomicLoad(&expert_next[e]);
    }
    workgroupBarrier();
    if (e != NO_EXPERT) {
      let row = start + rank;
      sorted_token[row] = i / params.top_k;
      row_of[i] = row;
      atomicAdd(&expert_next[e], 1u);
      // every bit is cleared by the lane that set it: the masks are empty for the next round
      atomicAnd(&lane_bits[e * MASK_WORDS + word], ~bit);
    }
    workgroupBarrier();
  }
}
