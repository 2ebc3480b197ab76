// Split-K paged decode attention on f16 subgroup matrices, the head's dims split among
// subgroups (lib/decode_tcdw2_main.wgsl), q read as qk_norm_rope_cache stored it.
//#include "lib/paged_kv.wgsl"
//#include "lib/stage_words.wgsl"
//#include "lib/attention_steps_tc.wgsl"
//#include "lib/decode_split_struct.wgsl"
//#include "lib/decode_q_stored.wgsl"
//#include "lib/decode_tcdw2_main.wgsl"
