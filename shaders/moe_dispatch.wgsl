// MoE dispatch on the GPU, so the host never reads a count back:
//   1. per-expert counts of the tokens * k assignments (workgroup atomics);
//   2. exclusive offsets over the experts, and for each expert its (expert, row tile)
//      work items of at most params.block_m rows;
//   3. a stable counting sort: assignment i = t * k + j lands on row
//      offset[e] + (number of earlier assignments to the same expert), so rows of an
//      expert are in token order and the permutation does not depend on scheduling;
//   4. the indirect dispatch args of both grouped GEMMs: (grid_x, work items, 1).
// Assignments are taken WG at a time; an assignment's rank within its round is the
// number of lower lanes holding the same expert: each lane sets its bit in its expert's
// WG-bit lane mask and counts the bits below its own (WG / 32 words at most, where scanning
// the round lane by lane cost the H200 1.8 ms a layer at 16384 tokens x 8).
// An expert id outside 0..E-1 is dropped: it gets row_of = 0xffffffff and no row.
// Workgroup w ranks the assignments of chunk w (CHUNK of them): a prefill step's 16384 tokens x 8
// took one workgroup's 512 rounds 0.49 ms a layer on the H200. Each workgroup counts every
// assignment itself (steps 1-2), so the chunks need no second dispatch; chunk 0 writes the
// offsets, the work items and the args.
// Bytes: N * 4 read (N = tokens * k; once a workgroup, from cache after the first),
// N * 8 + (E + 1) * 4 + 16 * (items + 1) + 24 written.
//#include "lib/moe_dispatch_steps.wgsl"

const_assert CHUNK % WG == 0u;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let n = params.tokens * params.top_k;
  let begin = wid.x * CHUNK;
  dispatch_assignments(lid, begin, min(begin + CHUNK, n));
}
