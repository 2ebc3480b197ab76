// Split-K paged attention for decode, tiled through workgroup memory (flash-decoding
// form; same params and outputs as paged_attention_decode.wgsl): the body of
// paged_attention_decode_tiled.wgsl (q read as stored) and paged_attention_decode_tiled_qk.wgsl
// (q normed and rotated from the projection here, the new key's K and V written first), which
// include it after the hooks that say how q arrives (decode_new_kv, decode_q_prepare,
// decode_q). Workgroup
// (split, seq, kv head) walks its split's keys TK (a variant constant) at a time:
//   1. the tile's K and V rows arrive in registers as stored (T4), every load of the tile in
//      flight at once (a thread's LPT K and LPT V elements, after its LPT block-table reads),
//      and go to workgroup memory as stored; the next tile's loads are issued before this
//      tile's math, so the HBM round trip overlaps it (one load round trip per tile, not one
//      per row: on the H200 the row-at-a-time form read KV at under 10% of the bandwidth);
//   2. every (key, head) score of the GQA group, one an invocation (TK * GMAX = WG), head
//      fastest (q rows padded by one vec4, so the 8 heads of a key hit distinct banks);
//   3. the tile's max per head in two steps (GMAX * TK / 4 invocations take 4 keys each,
//      then every invocation its head's parts), the new running max kept per tile parity,
//      each score's probability exp(s - max);
//   4. P V per (head, column), rescaled by exp(old max - new max); the running sum of the
//      probabilities is kept by each output's invocation in a register (no serial step).
// Each K/V row is read from memory once for all G query heads. One split: the normalised
// output goes to `out`; several: the split's output and log-sum-exp go to part_o/part_lse.
// Registers stay few (stored K/V elements, OUT_PER_THREAD outputs) so that several
// workgroups share an SM.

const HD4: u32 = MAX_HD / 4u;
const KS: u32 = HD4 + 1u; // padded row stride of k_sh
const QS: u32 = HD4 + 1u; // padded row stride of q_sh
const LPT: u32 = TK * HD4 / WG; // K (and V) elements a thread loads per tile
const NPART: u32 = TK / 4u; // parts of 4 keys of the max
const NEG: f32 = -1.0e30;
// the shape this shader assumes of its variant constants
const_assert TK * GMAX == WG; // one score an invocation
const_assert (TK * HD4) % WG == 0u; // whole loads a thread per tile
const_assert TK % 4u == 0u; // parts of 4 keys
const_assert OUT_PER_THREAD * WG >= GMAX * HD4; // every output owned

var<workgroup> q_sh: array<vec4<f32>, GMAX * QS>; // [g][c], scaled, 0 beyond the group
var<workgroup> k_sh: array<T4, TK * KS>; // [key][c] of the current K tile, as stored
var<workgroup> v_sh: array<T4, TK * HD4>; // [key][c] of the current V tile, as stored
var<workgroup> p_sh: array<f32, TK * GMAX>; // [key][g]: scores, then probabilities
var<workgroup> part_sh: array<f32, NPART * GMAX>; // [part][g]: max of its 4 keys' scores
var<workgroup> m_sh: array<f32, 2u * GMAX>; // [tile parity][g]: running max before the tile

// A thread's share of one tile: element e = lid + i * WG is (key e / HD4, column e % HD4).
struct TileRegs {
  k: array<T4, LPT>,
  v: array<T4, LPT>,
}

// Loads the tile of nt keys from key `first` (element 0 of the cache stands in past nt or
// head_dim: never stored where it is read): the block-table reads first, then every K and V
// load, none used before all are issued.
fn load_tile(seq: u32, kvh: u32, first: u32, nt: u32, lid: u32) -> TileRegs {
  let hd4 = params.head_dim / 4u;
  var at = array<u32, LPT>();
  for (var i = 0u; i < LPT; i++) {
    let e = lid + i * WG;
    let key = e / HD4;
    let c = e % HD4;
    if (key < nt && c < hd4) {
      at[i] = paged_kv_base(seq, first + key, kvh) + c;
    }
  }
  var r: TileRegs;
  for (var i = 0u; i < LPT; i++) {
    r.k[i] = k_cache[at[i]];
    r.v[i] = v_cache[at[i]];
  }
  return r;
}

fn store_tile(r: TileRegs, lid: u32) {
  for (var i = 0u; i < LPT; i++) {
    let e = lid + i * WG;
    let key = e / HD4;
    let c = e % HD4;
    k_sh[key * KS + c] = r.k[i];
    v_sh[key * HD4 + c] = r.v[i];
  }
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let ds = decode_split(wid, lid);
  if (ds.key_start >= ds.key_end) {
    write_empty_split(ds, lid);
    return;
  }
  let n_keys = ds.key_end - ds.key_start;
  // (the split that holds the new key writes its K and V first where the hooks take them)
  decode_new_kv(ds, lid);
  var next = load_tile(ds.seq, ds.kvh, ds.key_start, min(TK, n_keys), lid);
  decode_q_prepare(ds, lid);

  for (var i = lid; i < GMAX * HD4; i += WG) {
    let g = i / HD4;
    let c = i % HD4;
    var v = vec4<f32>(0.0);
    if (g < ds.group && c < ds.hd4) {
      v = decode_q(ds, g, c) * params.scale;
    }
    q_sh[g * QS + c] = v;
  }
  if (lid < GMAX) {
    m_sh[lid] = NEG;
  }
  // This invocation's score: (key lid / GMAX, head lid % GMAX) of each tile.
  let s_key = lid / GMAX;
  let s_g = lid % GMAX;
  // Its outputs: (g, c) for o = lid, lid + WG, ... < GMAX * HD4, with their running sums.
  var acc = array<vec4<f32>, OUT_PER_THREAD>();
  var l = array<f32, OUT_PER_THREAD>();

  var parity = 0u;
  for (var t0 = 0u; t0 < n_keys; t0 += TK) {
    let nt = min(TK, n_keys - t0);
    // the previous tile's readers are done with k_sh, v_sh, p_sh and part_sh
    workgroupBarrier();
    store_tile(next, lid);
    workgroupBarrier();
    if (t0 + TK < n_keys) {
      next = load_tile(ds.seq, ds.kvh, ds.key_start + t0 + TK, min(TK, n_keys - t0 - TK), lid);
    }
    let live = s_g < ds.group && s_key < nt;
    var score = NEG;
    if (live) {
      var d = vec4<f32>(0.0);
      for (var c = 0u; c < ds.hd4; c++) {
        d += q_sh[s_g * QS + c] * t4(k_sh[s_key * KS + c]);
      }
      score = d.x + d.y + d.z + d.w;
    }
    p_sh[lid] = score;
    workgroupBarrier();
    if (lid < NPART * GMAX) {
      let part = lid / GMAX;
      let g = lid % GMAX;
      var mx = NEG;
      for (var j = 0u; j < 4u; j++) {
        // (lanes of one head 32 floats apart: a 4-way bank conflict; part + j * NPART would
        // avoid it, not yet measured on the H200)
        mx = max(mx, p_sh[(part * 4u + j) * GMAX + g]);
      }
      part_sh[lid] = mx;
    }
    workgroupBarrier();
    var m_new = m_sh[parity * GMAX + s_g];
    for (var j = 0u; j < NPART; j++) {
      m_new = max(m_new, part_sh[j * GMAX + s_g]);
    }
    p_sh[lid] = select(0.0, exp(score - m_new), live);
    if (lid < GMAX) {
      m_sh[(1u - parity) * GMAX + lid] = m_new; // s_g = lid here
    }
    workgroupBarrier();
    for (var r = 0u; r < OUT_PER_THREAD; r++) {
      let o = lid + r * WG;
      let g = o / HD4;
      let c = o % HD4;
      if (g < ds.group && c < ds.hd4) {
        let alpha = exp(m_sh[parity * GMAX + g] - m_sh[(1u - parity) * GMAX + g]);
        var a = acc[r] * alpha;
        var sum = 0.0;
        for (var key = 0u; key < nt; key++) {
          let p = p_sh[key * GMAX + g];
          a += p * t4(v_sh[key * HD4 + c]);
          sum += p;
        }
        acc[r] = a;
        l[r] = l[r] * alpha + sum;
      }
    }
    parity = 1u - parity;
  }

  for (var r = 0u; r < OUT_PER_THREAD; r++) {
    let o = lid + r * WG;
    let g = o / HD4;
    let c = o % HD4;
    if (g < ds.group && c < ds.hd4) {
      let res = acc[r] / l[r];
      if (params.num_splits == 1u) {
        out[(ds.query_row * params.num_q_heads + ds.head0 + g) * ds.hd4 + c] = res;
      } else {
        let at = (ds.seq * params.num_q_heads + ds.head0 + g) * params.num_splits + ds.split;
        part_o[at * ds.hd4 + c] = res;
        if (c == 0u) {
          part_lse[at] = m_sh[parity * GMAX + g] + log(l[r]);
        }
      }
    }
  }
}
