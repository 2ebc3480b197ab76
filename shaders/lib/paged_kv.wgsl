// Paged KV addressing shared by the attention kernels. Needs `block_tables` (i32
// [num_seqs, max_blocks]) and params.{max_blocks, block_size, num_kv_heads, head_dim}.
// Returns the vec4 index of key `key` (a position of sequence `seq`), kv head `kvh`, in a
// cache [num_blocks, block_size, num_kv_heads, head_dim / 4] of vec4.
fn paged_kv_base(seq: u32, key: u32, kvh: u32) -> u32 {
  let block = u32(block_tables[seq * params.max_blocks + key / params.block_size]);
  let slot = block * params.block_size + key % params.block_size;
  return (slot * params.num_kv_heads + kvh) * (params.head_dim / 4u);
}
