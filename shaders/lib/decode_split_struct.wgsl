// A split-K decode attention workgroup's share of a decode step, uniform across the workgroup
// (lib/decode_split.wgsl finds it; the tensor-core forms build it from their own ids).
struct DecodeSplit {
  split: u32,
  seq: u32,
  kvh: u32,
  // query heads per kv head, and the first of this kv head's
  group: u32,
  head0: u32,
  // head_dim / 4
  hd4: u32,
  // the sequence's query token (its row of q and out) and context length
  query_row: u32,
  context_len: u32,
  // the split's keys [key_start, key_end): none when key_start >= key_end
  key_start: u32,
  key_end: u32,
}
