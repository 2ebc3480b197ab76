// Split-K paged decode attention, tiled through workgroup memory (lib/decode_tiled_main.wgsl),
// with qk_norm_rope_cache's work for the step's query tokens inside it (lib/decode_q_qkv.wgsl):
// see kernels/paged_attention_decode_qk.ts.
//#include "lib/paged_kv.wgsl"
//#include "lib/decode_split.wgsl"
//#include "lib/decode_q_qkv.wgsl"
//#include "lib/decode_tiled_main.wgsl"
