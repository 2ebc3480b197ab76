// Paged causal attention for prefill and any mix of sequences (see kernels/paged_attention.ts).
// Workgroup (q tile, seq, kv head): rows r < ROWS are (token t0 + r / G, head kvh * G + r % G)
// with G = num_q_heads / num_kv_heads, so each staged K/V tile serves the whole GQA group.
// Per key tile of BK keys: S = Q K^T (masked causally), an online-softmax update per row
// (running max, sum, rescale factor), then O = O * alpha + P V. All in f32.
//#include "lib/paged_kv.wgsl"

const HD4: u32 = MAX_HD / 4u;
// "No score": finite, since WGSL need not honour infinities.
const NEG: f32 = -1.0e30;
// Threads per row while scoring, and scores per thread per key tile.
const SPR: u32 = WG / ROWS;
const KPT: u32 = BK / SPR;
// A thread owns at most 8 output vec4s (o0..o7, named registers: drivers may spill an
// indexed private array to memory).
const_assert ROWS * HD4 / WG <= 8u;

var<workgroup> q_tile: array<vec4<f32>, ROWS * HD4>; // [row, d / 4], scaled queries
var<workgroup> kv_tile: array<vec4<f32>, BK * HD4>; // [key, d / 4], K then V of a key tile
var<workgroup> p_tile: array<f32, ROWS * BK>; // [row, key], scores then probabilities
var<workgroup> row_max: array<f32, ROWS>;
var<workgroup> row_sum: array<f32, ROWS>;
var<workgroup> row_alpha: array<f32, ROWS>;
var<workgroup> wg_query_start: u32;
var<workgroup> wg_query_len: u32;
var<workgroup> wg_context_len: u32;

// Stages keys [kb, kb + BK) of K (or V) into kv_tile; keys >= kv_end become zeros, so that
// a zero probability never meets a stale NaN.
fn stage_kv(is_v: bool, seq: u32, kvh: u32, kb: u32, kv_end: u32, lid: u32) {
  let hd4 = params.head_dim / 4u;
  for (var i = lid; i < BK * hd4; i += WG) {
    let j = i / hd4;
    let c = i % hd4;
    let key = kb + j;
    var v = vec4<f32>(0.0);
    if (key < kv_end) {
      let at = paged_kv_base(seq, key, kvh) + c;
      if (is_v) {
        v = vec4<f32>(v_cache[at]);
      } else {
        v = vec4<f32>(k_cache[at]);
      }
    }
    kv_tile[j * HD4 + c] = v;
  }
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

  for (var i = lid; i < ROWS * hd4; i += WG) {
    let r = i / hd4;
    let c = i % hd4;
    var v = vec4<f32>(0.0);
    if (r < n_rows) {
      let token = query_start + t0 + r / group;
      let head = kvh * group + r % group;
      v = q[(token * params.num_q_heads + head) * hd4 + c] * params.scale;
    }
    q_tile[r * HD4 + c] = v;
  }
  if (lid < ROWS) {
    row_max[lid] = NEG;
    row_sum[lid] = 0.0;
  }

  // Output ownership: column col of rows rg, rg + rgroups, ... (rpt of them; r_k for k >= rpt
  // is clamped to a valid row and its result discarded).
  let col = lid % hd4;
  let rgroups = WG / hd4;
  let rg = lid / hd4;
  let rpt = ROWS / rgroups;
  let r0 = rg;
  let r1 = min(rg + rgroups, ROWS - 1u);
  let r2 = min(rg + 2u * rgroups, ROWS - 1u);
  let r3 = min(rg + 3u * rgroups, ROWS - 1u);
  let r4 = min(rg + 4u * rgroups, ROWS - 1u);
  let r5 = min(rg + 5u * rgroups, ROWS - 1u);
  let r6 = min(rg + 6u * rgroups, ROWS - 1u);
  let r7 = min(rg + 7u * rgroups, ROWS - 1u);
  var o0 = vec4<f32>(0.0);
  var o1 = vec4<f32>(0.0);
  var o2 = vec4<f32>(0.0);
  var o3 = vec4<f32>(0.0);
  var o4 = vec4<f32>(0.0);
  var o5 = vec4<f32>(0.0);
  var o6 = vec4<f32>(0.0);
  var o7 = vec4<f32>(0.0);
  // Score ownership: row sr, keys sj, sj + SPR, ...
  let sr = lid / SPR;
  let sj = lid % SPR;
  let s_pos = first_pos + sr / group;

  for (var kb = 0u; kb < kv_end; kb += BK) {
    stage_kv(false, seq, kvh, kb, kv_end, lid);
    workgroupBarrier();
    for (var k = 0u; k < KPT; k++) {
      let j = sj + k * SPR;
      var s = NEG;
      if (sr < n_rows && kb + j <= s_pos) {
        var acc = 0.0;
        for (var c = 0u; c < hd4; c++) {
          acc += dot(q_tile[sr * HD4 + c], kv_tile[j * HD4 + c]);
        }
        s = acc;
      }
      p_tile[sr * BK + j] = s;
    }
    workgroupBarrier();
    stage_kv(true, seq, kvh, kb, kv_end, lid);
    if (lid < ROWS) {
      let m_old = row_max[lid];
      var m = m_old;
      for (var j = 0u; j < BK; j++) {
        m = max(m, p_tile[lid * BK + j]);
      }
      let alpha = exp(m_old - m);
      var l = row_sum[lid] * alpha;
      for (var j = 0u; j < BK; j++) {
        let s = p_tile[lid * BK + j];
        var p = 0.0;
        if (s > NEG) {
          p = exp(s - m);
        }
        p_tile[lid * BK + j] = p;
        l += p;
      }
      row_max[lid] = m;
      row_sum[lid] = l;
      row_alpha[lid] = alpha;
    }
    workgroupBarrier();
    o0 *= row_alpha[r0];
    o1 *= row_alpha[r1];
    o2 *= row_alpha[r2];
    o3 *= row_alpha[r3];
    o4 *= row_alpha[r4];
    o5 *= row_alpha[r5];
    o6 *= row_alpha[r6];
    o7 *= row_alpha[r7];
    for (var j = 0u; j < BK; j++) {
      let v = kv_tile[j * HD4 + col];
      o0 += p_tile[r0 * BK + j] * v;
      o1 += p_tile[r1 * BK + j] * v;
      o2 += p_tile[r2 * BK + j] * v;
      o3 += p_tile[r3 * BK + j] * v;
      o4 += p_tile[r4 * BK + j] * v;
      o5 += p_tile[r5 * BK + j] * v;
      o6 += p_tile[r6 * BK + j] * v;
      o7 += p_tile[r7 * BK + j] * v;
    }
    workgroupBarrier();
  }

  write_row(0u, rpt, r0, n_rows, o0, query_start + t0, kvh, group, col);
  write_row(1u, rpt, r1, n_rows, o1, query_start + t0, kvh, group, col);
  write_row(2u, rpt, r2, n_rows, o2, query_start + t0, kvh, group, col);
  write_row(3u, rpt, r3, n_rows, o3, query_start + t0, kvh, group, col);
  write_row(4u, rpt, r4, n_rows, o4, query_start + t0, kvh, group, col);
  write_row(5u, rpt, r5, n_rows, o5, query_start + t0, kvh, group, col);
  write_row(6u, rpt, r6, n_rows, o6, query_start + t0, kvh, group, col);
  write_row(7u, rpt, r7, n_rows, o7, query_start + t0, kvh, group, col);
}

// Writes output row r (the k-th a thread owns) when the thread owns it and it is a query.
fn write_row(
  k: u32,
  rpt: u32,
  r: u32,
  n_rows: u32,
  o: vec4<f32>,
  first_token: u32,
  kvh: u32,
  group: u32,
  col: u32,
) {
  if (k < rpt && r < n_rows) {
    let token = first_token + r / group;
    let head = kvh * group + r % group;
    out[(token * params.num_q_heads + head) * (params.head_dim / 4u) + col] = o / row_sum[r];
  }
}
