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
// Most output vec4s a thread owns (head_dim = MAX_HD).
const OPT: u32 = ROWS * HD4 / WG;

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

  // Output ownership: column col of rows rg, rg + rgroups, ...
  let col = lid % hd4;
  let rgroups = WG / hd4;
  let rg = lid / hd4;
  let rpt = ROWS / rgroups;
  var o = array<vec4<f32>, OPT>();
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
    for (var k = 0u; k < OPT; k++) {
      if (k < rpt) {
        o[k] *= row_alpha[rg + k * rgroups];
      }
    }
    for (var j = 0u; j < BK; j++) {
      let v = kv_tile[j * HD4 + col];
      for (var k = 0u; k < OPT; k++) {
        if (k < rpt) {
          o[k] += p_tile[(rg + k * rgroups) * BK + j] * v;
        }
      }
    }
    workgroupBarrier();
  }

  for (var k = 0u; k < OPT; k++) {
    let r = rg + k * rgroups;
    if (k < rpt && r < n_rows) {
      let token = query_start + t0 + r / group;
      let head = kvh * group + r % group;
      out[(token * params.num_q_heads + head) * hd4 + col] = o[k] / row_sum[r];
    }
  }
}
