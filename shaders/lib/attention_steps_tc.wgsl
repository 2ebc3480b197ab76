// The step machinery the staged tensor-core attention kernels share (paged_attention_tcs for
// prefill, one or several subgroups a workgroup; paged_attention_decode_tcdw for decode, one): a
// 16-key step's K or V loaded as 16-byte words and staged into wg.a, and the rescale and the
// read-out of an O slice through a subgroup's rows of wg.s_tile. The including shader declares
// `var<workgroup> wg` with f16 `a` ([key][d] rows QS apart) and f32 `s_tile` ([row][key] rows
// SS apart), binds k_cache and v_cache as vec4<u32> words (Variant.wideWords), includes
// lib/paged_kv.wgsl and lib/stage_words.wgsl, and declares KV_LANES, the invocations that load
// and stage a step's words (32 a subgroup).

// words of a 16-key step (16 keys x 16 words of 128 dims) each of the KV_LANES invocations loads
const KV_WORDS: u32 = 256u / KV_LANES;
// keys apart between the words an invocation loads
const KV_KEY_STRIDE: u32 = KV_LANES / 16u;
const_assert KV_WORDS * KV_LANES == 256u;

// The K (v_of false) or V words of the 16 keys from kb (inside one block) as a lane loads them,
// word lid % 16 of keys lid / 16 + KV_KEY_STRIDE i; zero words for keys at or past `end` (a
// stale slot must not meet a zero probability as Inf or NaN).
fn load_words(
  seq: u32,
  kvh: u32,
  kb: u32,
  end: u32,
  kv_words: u32,
  lid: u32,
  v_of: bool,
) -> array<vec4<u32>, KV_WORDS> {
  let base = paged_kv_base(seq, kb, kvh) / 2u + lid % 16u;
  let j0 = lid / 16u;
  let zero = vec4<u32>(0u);
  var r = array<vec4<u32>, KV_WORDS>();
  for (var i = 0u; i < KV_WORDS; i++) {
    let j = j0 + KV_KEY_STRIDE * i;
    let at = base + j * kv_words;
    let live = kb + j < end;
    if (v_of) {
      r[i] = select(zero, v_cache[at], live);
    } else {
      r[i] = select(zero, k_cache[at], live);
    }
  }
  return r;
}

// Stores a lane's words of a step (K or V) to wg.a as [key][d] rows.
fn store_words(r: array<vec4<u32>, KV_WORDS>, lid: u32) {
  let at = (lid / 16u) * QS + 8u * (lid % 16u);
  for (var i = 0u; i < KV_WORDS; i++) {
    put8a(at + KV_KEY_STRIDE * i * QS, r[i]);
  }
}

// O slice `o` with each row times its alpha, through the subgroup's 16 rows of wg.s_tile from
// `base` (barriers around: call it from uniform control flow).
fn rescaled(
  o: subgroup_matrix_result<f32, 16, 16>,
  base: u32,
  row: u32,
  half: u32,
  alpha: f32,
) -> subgroup_matrix_result<f32, 16, 16> {
  subgroupMatrixStore<row_major>(&wg.s_tile, base, o, SS);
  workgroupBarrier();
  let at = base + row * SS + 8u * half;
  for (var c = 0u; c < 8u; c++) {
    wg.s_tile[at + c] *= alpha;
  }
  workgroupBarrier();
  let r = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, base, SS);
  workgroupBarrier();
  return r;
}

// This invocation's 8 of row `row`'s 16 dims of O slice `o` (dims 8 half ..), times inv,
// through the subgroup's 16 rows of wg.s_tile from `base` (barriers around: call it from
// uniform control flow).
fn o_slice_dims(
  o: subgroup_matrix_result<f32, 16, 16>,
  base: u32,
  row: u32,
  half: u32,
  inv: f32,
) -> array<vec4<f32>, 2> {
  subgroupMatrixStore<row_major>(&wg.s_tile, base, o, SS);
  workgroupBarrier();
  let at = base + row * SS + 8u * half;
  let a = vec4<f32>(wg.s_tile[at], wg.s_tile[at + 1u], wg.s_tile[at + 2u], wg.s_tile[at + 3u]);
  let b = vec4<f32>(wg.s_tile[at + 4u], wg.s_tile[at + 5u], wg.s_tile[at + 6u], wg.s_tile[at + 7u]);
  workgroupBarrier();
  return array<vec4<f32>, 2>(a * inv, b * inv);
}
