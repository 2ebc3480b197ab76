// Paged causal attention for prefill and any mix of sequences (see kernels/paged_attention.ts).
// Workgroup (q tile, seq, kv head): rows r < ROWS are (token t0 + r / G, head kvh * G + r % G)
// with G = num_q_heads / num_kv_heads, so each staged K/V tile serves the whole GQA group.
//
// Thread (rg, cg), rg = lid / CG, cg = lid % CG, owns the 4 rows 4 rg .. 4 rg + 3 in
// registers: per key tile the scores of keys cg + k CG (k < KPT), and the output columns
// (vec4) cg + k CG (k < 4) of the running O, with the row maxima and its share of the row
// sums as vec4 (one lane a row). Per key tile of BK keys, with two barriers:
//   S = Q K^T (masked causally) -> row maxima of the thread's keys to m_tile
//   barrier A
//   new row max from every column group's maxima; P = exp(S - max) to p_tile; rescale O;
//   store V of this tile and K of the next one (loaded into registers before S)
//   barrier B
//   O += P V
// Softmax and accumulation in f32; K is staged as f32, V as T (converted when used).
//#include "lib/paged_kv.wgsl"

const HD4: u32 = MAX_HD / 4u;
// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Row groups of 4 rows, and column groups (threads sharing a row group).
const RG: u32 = ROWS / 4u;
const CG: u32 = WG / RG;
// Scores per row per thread and key tile.
const KPT: u32 = BK / CG;
// Staging: SPK threads per key, each loading NC vec4 columns ssub + n * SPK.
const SPK: u32 = WG / BK;
const NC: u32 = HD4 / SPK;
// Row stride of k_tile: one vec4 of padding keeps the CG keys read at once on distinct banks.
const KS: u32 = HD4 + 1u;
const_assert RG * 4u == ROWS;
const_assert CG * 4u == HD4; // 4 output vec4 columns a thread (o*0 .. o*3)
const_assert KPT * CG == BK && KPT >= 1u && KPT <= 2u;
const_assert SPK * BK == WG && NC * SPK == HD4 && NC <= 8u;

var<workgroup> q_tile: array<vec4<f32>, MAX_HD * RG>; // [d, row / 4]: scaled q of 4 rows
var<workgroup> k_tile: array<vec4<f32>, BK * KS>; // [key, d / 4]
var<workgroup> v_tile: array<vec4<T>, BK * HD4>; // [key, d / 4]
var<workgroup> p_tile: array<vec4<f32>, BK * RG>; // [key, row / 4]: probabilities
var<workgroup> m_tile: array<vec4<f32>, CG * RG>; // [cg, row / 4]: row maxima, then sums
var<workgroup> wg_query_start: u32;
var<workgroup> wg_query_len: u32;
var<workgroup> wg_context_len: u32;

// Scaled q (vec4 column c) of row r, zero for a row past the tile.
fn load_q(r: u32, n_rows: u32, first_token: u32, kvh: u32, group: u32, c: u32) -> vec4<f32> {
  if (r >= n_rows) {
    return vec4<f32>(0.0);
  }
  let token = first_token + r / group;
  let head = kvh * group + r % group;
  return q[(token * params.num_q_heads + head) * (params.head_dim / 4u) + c] * params.scale;
}

// The n-th staged vec4 of a thread's key (at paged index `base`; zeros when !ok).
fn load_k(base: u32, ok: bool, n: u32, ssub: u32) -> vec4<T> {
  let c = ssub + n * SPK;
  if (n < NC && ok && c < params.head_dim / 4u) {
    return k_cache[base + c];
  }
  return vec4<T>(0.0);
}

fn load_v(base: u32, ok: bool, n: u32, ssub: u32) -> vec4<T> {
  let c = ssub + n * SPK;
  if (n < NC && ok && c < params.head_dim / 4u) {
    return v_cache[base + c];
  }
  return vec4<T>(0.0);
}

fn store_k(key: u32, n: u32, ssub: u32, v: vec4<T>) {
  if (n < NC) {
    k_tile[key * KS + ssub + n * SPK] = vec4<f32>(v);
  }
}

fn store_v(key: u32, n: u32, ssub: u32, v: vec4<T>) {
  if (n < NC) {
    v_tile[key * HD4 + ssub + n * SPK] = v;
  }
}

// Paged index of this thread's staging key, or 0 when it is past the keys (not loaded).
fn key_base(seq: u32, key: u32, kv_end: u32, kvh: u32) -> u32 {
  if (key < kv_end) {
    return paged_kv_base(seq, key, kvh);
  }
  return 0u;
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let seq = wid.y;
  let kvh = wid.z;
  let group = params.num_q_heads / params.num_kv_heads;
  let tq = ROWS / group;
  let hd4 = params.head_dim / 4u;
  if (lid == 0u) {
    wg_query_start = u32(seq_info[seq * 3u]);
    wg_query_len = u32(seq_info[seq * 3u + 1u]);
    wg_context_len = u32(seq_info[seq * 3u + 2u]);
  }
  let query_start = workgroupUniformLoad(&wg_query_start);
  let query_len = workgroupUniformLoad(&wg_query_len);
  let context_len = workgroupUniformLoad(&wg_context_len);
  // Last tiles first: causal tiles grow with their index.
  let tile = (params.max_query_len + tq - 1u) / tq - 1u - wid.x;
  let t0 = tile * tq;
  if (t0 >= query_len) {
    return;
  }
  let tile_tokens = min(tq, query_len - t0);
  let n_rows = tile_tokens * group;
  let first_pos = context_len - query_len + t0;
  let kv_end = first_pos + tile_tokens;
  let n_tiles = (kv_end + BK - 1u) / BK;
  let first_token = query_start + t0;

  // q_tile[d, g] = q of rows 4g .. 4g + 3 at dim d (a 4 x 4 transpose per item).
  for (var i = lid; i < RG * hd4; i += WG) {
    let g = i / hd4;
    let c = i % hd4;
    let a = load_q(4u * g, n_rows, first_token, kvh, group, c);
    let b = load_q(4u * g + 1u, n_rows, first_token, kvh, group, c);
    let e = load_q(4u * g + 2u, n_rows, first_token, kvh, group, c);
    let f = load_q(4u * g + 3u, n_rows, first_token, kvh, group, c);
    q_tile[(4u * c) * RG + g] = vec4<f32>(a.x, b.x, e.x, f.x);
    q_tile[(4u * c + 1u) * RG + g] = vec4<f32>(a.y, b.y, e.y, f.y);
    q_tile[(4u * c + 2u) * RG + g] = vec4<f32>(a.z, b.z, e.z, f.z);
    q_tile[(4u * c + 3u) * RG + g] = vec4<f32>(a.w, b.w, e.w, f.w);
  }

  // Staging role: key skey of every tile, vec4 columns ssub + n * SPK. Keys >= kv_end are
  // staged as zeros, so that a zero probability never meets a stale NaN.
  let skey = lid / SPK;
  let ssub = lid % SPK;
  var base = key_base(seq, skey, kv_end, kvh);
  let k_ok0 = skey < kv_end;
  store_k(skey, 0u, ssub, load_k(base, k_ok0, 0u, ssub));
  store_k(skey, 1u, ssub, load_k(base, k_ok0, 1u, ssub));
  store_k(skey, 2u, ssub, load_k(base, k_ok0, 2u, ssub));
  store_k(skey, 3u, ssub, load_k(base, k_ok0, 3u, ssub));
  store_k(skey, 4u, ssub, load_k(base, k_ok0, 4u, ssub));
  store_k(skey, 5u, ssub, load_k(base, k_ok0, 5u, ssub));
  store_k(skey, 6u, ssub, load_k(base, k_ok0, 6u, ssub));
  store_k(skey, 7u, ssub, load_k(base, k_ok0, 7u, ssub));

  let rg = lid / CG;
  let cg = lid % CG;
  let r0 = 4u * rg;
  // Last key each of the thread's rows may see (a padding row sees the tile's keys).
  let lim = min(
    vec4<u32>(first_pos) + vec4<u32>(r0, r0 + 1u, r0 + 2u, r0 + 3u) / group,
    vec4<u32>(kv_end - 1u),
  );
  let j0 = cg;
  let j1 = cg + CG; // used when KPT = 2
  var m_run = vec4<f32>(NEG);
  var l_run = vec4<f32>(0.0);
  // o<row><k>: row r0 + row, output vec4 column cg + k * CG.
  var o00 = vec4<f32>(0.0);
  var o01 = vec4<f32>(0.0);
  var o02 = vec4<f32>(0.0);
  var o03 = vec4<f32>(0.0);
  var o10 = vec4<f32>(0.0);
  var o11 = vec4<f32>(0.0);
  var o12 = vec4<f32>(0.0);
  var o13 = vec4<f32>(0.0);
  var o20 = vec4<f32>(0.0);
  var o21 = vec4<f32>(0.0);
  var o22 = vec4<f32>(0.0);
  var o23 = vec4<f32>(0.0);
  var o30 = vec4<f32>(0.0);
  var o31 = vec4<f32>(0.0);
  var o32 = vec4<f32>(0.0);
  var o33 = vec4<f32>(0.0);
  workgroupBarrier();

  for (var t = 0u; t < n_tiles; t++) {
    let kb = t * BK;
    // Loads for after barrier A, issued now so that S hides their latency: V of this tile
    // (the key K was staged from), K of the next tile.
    let v_ok = kb + skey < kv_end;
    let nkey = kb + BK + skey;
    let k_ok = nkey < kv_end;
    let nbase = key_base(seq, nkey, kv_end, kvh);
    let va0 = load_v(base, v_ok, 0u, ssub);
    let va1 = load_v(base, v_ok, 1u, ssub);
    let va2 = load_v(base, v_ok, 2u, ssub);
    let va3 = load_v(base, v_ok, 3u, ssub);
    let va4 = load_v(base, v_ok, 4u, ssub);
    let va5 = load_v(base, v_ok, 5u, ssub);
    let va6 = load_v(base, v_ok, 6u, ssub);
    let va7 = load_v(base, v_ok, 7u, ssub);
    let ka0 = load_k(nbase, k_ok, 0u, ssub);
    let ka1 = load_k(nbase, k_ok, 1u, ssub);
    let ka2 = load_k(nbase, k_ok, 2u, ssub);
    let ka3 = load_k(nbase, k_ok, 3u, ssub);
    let ka4 = load_k(nbase, k_ok, 4u, ssub);
    let ka5 = load_k(nbase, k_ok, 5u, ssub);
    let ka6 = load_k(nbase, k_ok, 6u, ssub);
    let ka7 = load_k(nbase, k_ok, 7u, ssub);
    base = nbase;

    // Scores of rows r0 .. r0 + 3 (lanes) against keys kb + j0 (s0) and kb + j1 (s1).
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    for (var c = 0u; c < hd4; c++) {
      let qx = q_tile[(4u * c) * RG + rg];
      let qy = q_tile[(4u * c + 1u) * RG + rg];
      let qz = q_tile[(4u * c + 2u) * RG + rg];
      let qw = q_tile[(4u * c + 3u) * RG + rg];
      let k0 = k_tile[j0 * KS + c];
      s0 += qx * k0.x;
      s0 += qy * k0.y;
      s0 += qz * k0.z;
      s0 += qw * k0.w;
      if (KPT > 1u) {
        let k1 = k_tile[j1 * KS + c];
        s1 += qx * k1.x;
        s1 += qy * k1.y;
        s1 += qz * k1.z;
        s1 += qw * k1.w;
      }
    }
    s0 = select(vec4<f32>(NEG), s0, vec4<u32>(kb + j0) <= lim);
    var pm = s0;
    if (KPT > 1u) {
      s1 = select(vec4<f32>(NEG), s1, vec4<u32>(kb + j1) <= lim);
      pm = max(s0, s1);
    }
    m_tile[cg * RG + rg] = pm;
    workgroupBarrier();

    var mx = m_run;
    for (var g = 0u; g < CG; g++) {
      mx = max(mx, m_tile[g * RG + rg]);
    }
    let alpha = exp(m_run - mx);
    m_run = mx;
    let p0 = select(vec4<f32>(0.0), exp(s0 - mx), s0 > vec4<f32>(NEG));
    p_tile[j0 * RG + rg] = p0;
    var psum = p0;
    if (KPT > 1u) {
      let p1 = select(vec4<f32>(0.0), exp(s1 - mx), s1 > vec4<f32>(NEG));
      p_tile[j1 * RG + rg] = p1;
      psum += p1;
    }
    l_run = l_run * alpha + psum;
    o00 *= alpha.x;
    o01 *= alpha.x;
    o02 *= alpha.x;
    o03 *= alpha.x;
    o10 *= alpha.y;
    o11 *= alpha.y;
    o12 *= alpha.y;
    o13 *= alpha.y;
    o20 *= alpha.z;
    o21 *= alpha.z;
    o22 *= alpha.z;
    o23 *= alpha.z;
    o30 *= alpha.w;
    o31 *= alpha.w;
    o32 *= alpha.w;
    o33 *= alpha.w;
    store_v(skey, 0u, ssub, va0);
    store_v(skey, 1u, ssub, va1);
    store_v(skey, 2u, ssub, va2);
    store_v(skey, 3u, ssub, va3);
    store_v(skey, 4u, ssub, va4);
    store_v(skey, 5u, ssub, va5);
    store_v(skey, 6u, ssub, va6);
    store_v(skey, 7u, ssub, va7);
    store_k(skey, 0u, ssub, ka0);
    store_k(skey, 1u, ssub, ka1);
    store_k(skey, 2u, ssub, ka2);
    store_k(skey, 3u, ssub, ka3);
    store_k(skey, 4u, ssub, ka4);
    store_k(skey, 5u, ssub, ka5);
    store_k(skey, 6u, ssub, ka6);
    store_k(skey, 7u, ssub, ka7);
    workgroupBarrier();

    for (var j = 0u; j < BK; j++) {
      let p = p_tile[j * RG + rg];
      let v0 = vec4<f32>(v_tile[j * HD4 + cg]);
      let v1 = vec4<f32>(v_tile[j * HD4 + cg + CG]);
      let v2 = vec4<f32>(v_tile[j * HD4 + cg + 2u * CG]);
      let v3 = vec4<f32>(v_tile[j * HD4 + cg + 3u * CG]);
      o00 += p.x * v0;
      o01 += p.x * v1;
      o02 += p.x * v2;
      o03 += p.x * v3;
      o10 += p.y * v0;
      o11 += p.y * v1;
      o12 += p.y * v2;
      o13 += p.y * v3;
      o20 += p.z * v0;
      o21 += p.z * v1;
      o22 += p.z * v2;
      o23 += p.z * v3;
      o30 += p.w * v0;
      o31 += p.w * v1;
      o32 += p.w * v2;
      o33 += p.w * v3;
    }
  }

  // Row sums: every column group holds the sum over its own keys (all rescaled alike).
  // m_tile is free: its last reads came before the last barrier B.
  m_tile[cg * RG + rg] = l_run;
  workgroupBarrier();
  var l = vec4<f32>(0.0);
  for (var g = 0u; g < CG; g++) {
    l += m_tile[g * RG + rg];
  }
  let inv = 1.0 / l;
  write_out(r0, n_rows, first_token, kvh, group, cg, o00 * inv.x);
  write_out(r0, n_rows, first_token, kvh, group, cg + CG, o01 * inv.x);
  write_out(r0, n_rows, first_token, kvh, group, cg + 2u * CG, o02 * inv.x);
  write_out(r0, n_rows, first_token, kvh, group, cg + 3u * CG, o03 * inv.x);
  write_out(r0 + 1u, n_rows, first_token, kvh, group, cg, o10 * inv.y);
  write_out(r0 + 1u, n_rows, first_token, kvh, group, cg + CG, o11 * inv.y);
  write_out(r0 + 1u, n_rows, first_token, kvh, group, cg + 2u * CG, o12 * inv.y);
  write_out(r0 + 1u, n_rows, first_token, kvh, group, cg + 3u * CG, o13 * inv.y);
  write_out(r0 + 2u, n_rows, first_token, kvh, group, cg, o20 * inv.z);
  write_out(r0 + 2u, n_rows, first_token, kvh, group, cg + CG, o21 * inv.z);
  write_out(r0 + 2u, n_rows, first_token, kvh, group, cg + 2u * CG, o22 * inv.z);
  write_out(r0 + 2u, n_rows, first_token, kvh, group, cg + 3u * CG, o23 * inv.z);
  write_out(r0 + 3u, n_rows, first_token, kvh, group, cg, o30 * inv.w);
  write_out(r0 + 3u, n_rows, first_token, kvh, group, cg + CG, o31 * inv.w);
  write_out(r0 + 3u, n_rows, first_token, kvh, group, cg + 2u * CG, o32 * inv.w);
  write_out(r0 + 3u, n_rows, first_token, kvh, group, cg + 3u * CG, o33 * inv.w);
}

// Writes vec4 column c of output row r when r is a query row and c a column of the head.
fn write_out(
  r: u32,
  n_rows: u32,
  first_token: u32,
  kvh: u32,
  group: u32,
  c: u32,
  o: vec4<f32>,
) {
  let hd4 = params.head_dim / 4u;
  if (r < n_rows && c < hd4) {
    let token = first_token + r / group;
    let head = kvh * group + r % group;
    out[(token * params.num_q_heads + head) * hd4 + c] = o;
  }
}
