// Split-K paged attention for decode, one key per lane (same bindings, params and outputs as
// paged_attention_decode.wgsl). Workgroup (split, seq, kv head) has NW subgroups of SG lanes;
// subgroup w takes chunks w, w + NW, ... of SG consecutive keys of its split:
//   1. scores: lane j reads key j's K row (vec4 steps) and dots it with the G query heads
//      held in workgroup memory (broadcast reads);
//   2. an online softmax per head within the subgroup (subgroupMax, subgroupAdd);
//   3. P V: lane j owns head-dim vec4 columns j, j + SG, ...; for each key of the chunk the
//      subgroup reads its V row together (coalesced) and every lane takes the key's
//      probabilities by subgroup shuffle.
// No barrier inside the key loop; the NW subgroups' (max, sum, output) meet once in
// workgroup memory at the end. Every subgroup operation sits in workgroup-uniform control
// flow (loop bounds from params and the sequence; per-lane conditions only around loads).
// Needs subgroups of exactly SG lanes laid out as consecutive invocations. Workgroup memory:
// q (GMAX x MAX_HD f32) and every subgroup's unnormalised output (NW x GMAX x MAX_HD f32),
// about 20 KiB.
//#include "lib/paged_kv.wgsl"
//#include "lib/decode_split.wgsl"

const HD4: u32 = MAX_HD / 4u;
const DL: u32 = (HD4 + SG - 1u) / SG; // head-dim vec4 columns a lane owns in P V
const NW: u32 = WG / SG; // subgroups of the workgroup
const NEG: f32 = -1.0e30;

var<workgroup> q_sh: array<vec4<f32>, GMAX * HD4>; // [g][c], scaled, 0 beyond the group
var<workgroup> m_sh: array<f32, NW * GMAX>; // [w][g] running max of subgroup w
var<workgroup> l_sh: array<f32, NW * GMAX>; // [w][g] running sum
var<workgroup> o_sh: array<vec4<f32>, NW * GMAX * HD4>; // [w][g][c] unnormalised output

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let lane = lid % SG;
  let w = lid / SG;
  let ds = decode_split(wid, lid);
  if (ds.key_start >= ds.key_end) {
    write_empty_split(ds, lid);
    return;
  }
  let chunks = (ds.key_end - ds.key_start + SG - 1u) / SG;

  for (var i = lid; i < GMAX * HD4; i += WG) {
    let g = i / HD4;
    let c = i % HD4;
    var v = vec4<f32>(0.0);
    if (g < ds.group && c < ds.hd4) {
      v = q[(ds.query_row * params.num_q_heads + ds.head0 + g) * ds.hd4 + c] * params.scale;
    }
    q_sh[i] = v;
  }
  workgroupBarrier();

  var m = array<f32, GMAX>();
  var l = array<f32, GMAX>();
  var o = array<vec4<f32>, GMAX * DL>();
  for (var g = 0u; g < GMAX; g++) {
    m[g] = NEG;
  }
  // chunk i0 + w of the ds.split; the loop bound is the same for every subgroup
  for (var i0 = 0u; i0 < chunks; i0 += NW) {
    let first = ds.key_start + (i0 + w) * SG; // this subgroup's chunk (may be past ds.key_end)
    let key = first + lane;
    let valid = key < ds.key_end;
    var s = array<f32, GMAX>();
    // this lane's key's row (K and V share it), passed to the others for P V below
    let kb = select(0u, paged_kv_base(ds.seq, key, ds.kvh), valid);
    if (valid) {
      for (var c = 0u; c < ds.hd4; c++) {
        let kv = t4(k_cache[kb + c]);
        for (var g = 0u; g < GMAX; g++) {
          if (g < ds.group) {
            s[g] += dot(q_sh[g * HD4 + c], kv);
          }
        }
      }
    }
    var p = array<f32, GMAX>();
    // constant trip counts with a uniform guard, so the per-head arrays stay in registers
    for (var g = 0u; g < GMAX; g++) {
      if (g < ds.group) {
        let sc = select(NEG, s[g], valid);
        let mx = max(m[g], subgroupMax(sc));
        let alpha = exp(m[g] - mx);
        p[g] = select(0.0, exp(sc - mx), valid);
        l[g] = l[g] * alpha + subgroupAdd(p[g]);
        m[g] = mx;
        for (var d = 0u; d < DL; d++) {
          o[g * DL + d] *= alpha;
        }
      }
    }
    for (var j = 0u; j < SG; j++) {
      var pj = array<f32, GMAX>();
      for (var g = 0u; g < GMAX; g++) {
        if (g < ds.group) {
          pj[g] = subgroupShuffle(p[g], j);
        }
      }
      let base = subgroupShuffle(kb, j);
      if (first + j < ds.key_end) {
        for (var d = 0u; d < DL; d++) {
          let c = lane + d * SG;
          if (c < ds.hd4) {
            let vv = t4(v_cache[base + c]);
            for (var g = 0u; g < GMAX; g++) {
              if (g < ds.group) {
                o[g * DL + d] += pj[g] * vv;
              }
            }
          }
        }
      }
    }
  }

  // the NW subgroups meet: max, rescaled sums and outputs
  for (var g = 0u; g < GMAX; g++) {
    if (lane == 0u) {
      m_sh[w * GMAX + g] = m[g];
      l_sh[w * GMAX + g] = l[g];
    }
    for (var d = 0u; d < DL; d++) {
      let c = lane + d * SG;
      if (c < HD4) {
        o_sh[(w * GMAX + g) * HD4 + c] = o[g * DL + d];
      }
    }
  }
  workgroupBarrier();
  for (var i = lid; i < GMAX * HD4; i += WG) {
    let g = i / HD4;
    let c = i % HD4;
    if (g < ds.group && c < ds.hd4) {
      var mx = NEG;
      for (var u = 0u; u < NW; u++) {
        mx = max(mx, m_sh[u * GMAX + g]);
      }
      var sum = 0.0;
      var acc = vec4<f32>(0.0);
      for (var u = 0u; u < NW; u++) {
        let f = exp(m_sh[u * GMAX + g] - mx);
        sum += l_sh[u * GMAX + g] * f;
        acc += o_sh[(u * GMAX + g) * HD4 + c] * f;
      }
      let res = acc / sum;
      if (params.num_splits == 1u) {
        out[(ds.query_row * params.num_q_heads + ds.head0 + g) * ds.hd4 + c] = res;
      } else {
        let at = (ds.seq * params.num_q_heads + ds.head0 + g) * params.num_splits + ds.split;
        part_o[at * ds.hd4 + c] = res;
        if (c == 0u) {
          part_lse[at] = mx + log(sum);
        }
      }
    }
  }
}
