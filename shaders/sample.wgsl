// Sampling, one workgroup per row of logits: greedy argmax (ties to the lowest id) when
// the row's temperature is 0, else the Gumbel-max trick,
//   id = argmax_i (logits[i] / temperature + g_i),  g_i = -log(-log(u_i)),
// with u_i from a counter-based hash of (seed, position, i): deterministic, reproducible
// on the CPU (kernels/sample.ts), and independent of how rows are batched.
// -log(u) is taken from a series in w = 1 - u when u is near 1 (where log(u) would lose
// the digits that decide the winner). sampling[row] = (bitcast temperature, seed,
// position, 0). Logits must be finite.
// Each invocation keeps UNR loads in flight (a row of the Qwen3 vocabulary is 594 KB, and
// one load at a time made this kernel take about 230 us a step on the H200 at every batch);
// the winner does not depend on the order in which values are compared (value, then id).
// Bytes: rows * vocab * 4 read, rows * 20 otherwise.
//#include "lib/hash_u32.wgsl"

const NO_TOKEN: u32 = 0xffffffffu;
var<workgroup> best_value: array<f32, WG>;
var<workgroup> best_index: array<u32, WG>;

fn gumbel(key: u32, i: u32) -> f32 {
  let h = hash_u32(hash_u32(i) ^ key);
  let u = (f32(h >> 9u) + 0.5) * (1.0 / 8388608.0);
  let w = 1.0 - u;
  var e: f32;
  if (w < 0.0625) {
    e = w * (1.0 + w * (0.5 + w * (1.0 / 3.0 + w * (0.25 + w * (0.2 + w / 6.0)))));
  } else {
    e = -log(u);
  }
  return -log(e);
}

// Is (v, i) ahead of (bv, bi)? Larger value first, then lower id; NO_TOKEN is last.
fn ahead(v: f32, i: u32, bv: f32, bi: u32) -> bool {
  return i != NO_TOKEN && (bi == NO_TOKEN || v > bv || (v == bv && i < bi));
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= params.rows) {
    return;
  }
  let temperature = bitcast<f32>(sampling[row * 4u]);
  let greedy = !(temperature > 0.0);
  let key = hash_u32(hash_u32(sampling[row * 4u + 1u]) ^ sampling[row * 4u + 2u]);
  let base = row * params.vocab;
  var bv = 0.0;
  var bi = NO_TOKEN;
  var i = lid;
  // whole groups of UNR values a lane, their loads issued together
  for (; i + (UNR - 1u) * WG < params.vocab; i += UNR * WG) {
    var vals = array<f32, UNR>();
    for (var u = 0u; u < UNR; u++) {
      vals[u] = logits[base + i + u * WG];
    }
    for (var u = 0u; u < UNR; u++) {
      let j = i + u * WG;
      var v = vals[u];
      if (!greedy) {
        v = v / temperature + gumbel(key, j);
      }
      if (ahead(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
  }
  for (; i < params.vocab; i += WG) {
    var v = logits[base + i];
    if (!greedy) {
      v = v / temperature + gumbel(key, i);
    }
    if (ahead(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  best_value[lid] = bv;
  best_index[lid] = bi;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
    if (lid < stride) {
      let v = best_value[lid + stride];
      let i = best_index[lid + stride];
      if (ahead(v, i, best_value[lid], best_index[lid])) {
        best_value[lid] = v;
        best_index[lid] = i;
      }
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    sampled[row] = i32(best_index[0]);
  }
}
