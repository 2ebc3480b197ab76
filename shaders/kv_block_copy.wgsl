// Copy-on-write forks (see kernels/kv_block_copy.ts): workgroup (chunk, pair) copies one
// chunk of WG * PER_THREAD vec4 of block pairs[p, 0] to block pairs[p, 1], in both the K
// and the V cache of a layer.
@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let pair = wid.y + wid.z * nwg.y;
  if (pair >= params.num_pairs) {
    return;
  }
  let block_vec4 = params.block_size * params.num_kv_heads * params.head_dim / 4u;
  let src = u32(pairs[pair * 2u]) * block_vec4;
  let dst = u32(pairs[pair * 2u + 1u]) * block_vec4;
  let end = min(block_vec4, (wid.x + 1u) * WG * PER_THREAD);
  for (var i = wid.x * WG * PER_THREAD + lid; i < end; i += WG) {
    k_cache[dst + i] = k_cache[src + i];
    v_cache[dst + i] = v_cache[src + i];
  }
}
