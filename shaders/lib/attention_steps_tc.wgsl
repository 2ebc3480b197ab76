// The step machinery the staged one-subgroup tensor-core attention kernels share
// (paged_attention_tcs for prefill, paged_attention_decode_tcdw for decode): a 16-key step's K
// or V loaded as 16-byte words and staged into wg.a, and the rescale of an O slice through
// wg.s_tile. The including shader declares `var<workgroup> wg` with f16 `a` ([key][d] rows QS
// apart) and f32 `s_tile` ([row][key] rows SS apart), binds k_cache and v_cache as vec4<u32>
// words (Variant.wideWords) and includes lib/paged_kv.wgsl and lib/stage_words.wgsl.

// The K (v_of false) or V words of the 16 keys from kb (inside one block) as a lane loads them,
// word lid % 16 of keys lid / 16 + 2 i; zero words for keys at or past `end` (a stale slot must
// not meet a zero probability as Inf or NaN).
fn load_words(
  seq: u32,
  kvh: u32,
  kb: u32,
  end: u32,
  kv_words: u32,
  lid: u32,
  v_of: bool,
) -> array<vec4<u32>, 8> {
  let base = paged_kv_base(seq, kb, kvh) / 2u + lid % 16u;
  let j0 = lid / 16u;
  let zero = vec4<u32>(0u);
  var r = array<vec4<u32>, 8>();
  for (var i = 0u; i < 8u; i++) {
    let j = j0 + 2u * i;
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
fn store_words(r: array<vec4<u32>, 8>, lid: u32) {
  let at = (lid / 16u) * QS + 8u * (lid % 16u);
  for (var i = 0u; i < 8u; i++) {
    put8a(at + 2u * i * QS, r[i]);
  }
}

// O slice `o` with each row times its alpha (through wg.s_tile, barriers around: call it from
// uniform control flow).
fn rescaled(
  o: subgroup_matrix_result<f32, 16, 16>,
  row: u32,
  half: u32,
  alpha: f32,
) -> subgroup_matrix_result<f32, 16, 16> {
  subgroupMatrixStore<row_major>(&wg.s_tile, 0u, o, SS);
  workgroupBarrier();
  let at = row * SS + 8u * half;
  for (var c = 0u; c < 8u; c++) {
    wg.s_tile[at + c] *= alpha;
  }
  workgroupBarrier();
  let r = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&wg.s_tile, 0u, SS);
  workgroupBarrier();
  return r;
}
