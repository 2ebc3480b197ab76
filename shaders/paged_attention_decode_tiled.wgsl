// Split-K paged decode attention, tiled through workgroup memory (lib/decode_tiled_main.wgsl),
// q read as qk_norm_rope_cache stored it.
//#include "lib/paged_kv.wgsl"
//#include "lib/decode_split.wgsl"
//#include "lib/decode_q_stored.wgsl"
//#include "lib/decode_tiled_main.wgsl"
