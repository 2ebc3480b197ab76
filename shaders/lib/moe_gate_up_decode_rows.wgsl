// The lane-group gate/up decode forms' work on rows first .. end of expert e (expert-sorted
// rows, act columns of the workgroup's column block bx), weight bound: the expert's weights
// are read once per RT rows at the HBM rate, each load applied to every row in registers. A
// lane group of LG invocations owns GC act columns (their gate rows and up rows of w[e]); its
// lanes split the hidden dimension in weight words (WV vec4s), UNR loads in flight per column,
// and meet through subgroup shuffles (no workgroup memory, no barrier).
//   act[r, c] = silu(x[token_of(r)] . w[e, c]) * (x[token_of(r)] . w[e, inter + c])
// The including shader binds x, w and act, has params.{hidden, inter}, defines
// token_of(row) (the token whose x row a row reads) and includes lane_group_sum,
// lane_group_dots and expert_tiles.
const CPW: u32 = (WG / LG) * GC; // act columns a workgroup owns
const WC: u32 = 2u * GC; // weight rows a lane group reads: GC gate rows, then GC up rows

// word kk (WV vec4s of weights) of the expert weight row at wo, row by row or in tiles
fn w_index(wo: u32, kk: u32) -> u32 {
  return wo + tile_unit(kk, WV);
}

fn row_in(i: u32) -> vec4<f32> {
  return x[i];
}

fn gate_up_decode_rows(e: u32, first: u32, end: u32, bx: u32, lid: u32) {
  let inter = params.inter;
  let k4 = params.hidden / 4u;
  let kw = k4 / WV; // weight words a row
  let lane = lid % LG;
  let c0 = bx * CPW + (lid / LG) * GC;
  // Columns past inter read a valid row and are never written.
  var wo = array<u32, WC>();
  for (var c = 0u; c < GC; c++) {
    wo[c] = (e * 2u * inter * params.hidden + tile_row(min(c0 + c, inter - 1u), params.hidden)) /
      (4u * WV);
    wo[GC + c] = wo[c] + inter * kw;
  }
  for (var r0 = first; r0 < end; r0 += RT) {
    let nr = min(RT, end - r0);
    var xo = array<u32, RT>();
    for (var r = 0u; r < RT; r++) {
      xo[r] = token_of(r0 + min(r, nr - 1u)) * k4;
    }
    let acc = lane_group_dots(wo, xo, nr, kw, lane);
    for (var r = 0u; r < RT; r++) {
      if (r < nr) {
        for (var c = 0u; c < GC; c++) {
          let g = lane_group_sum(acc[r * WC + c]);
          let up = lane_group_sum(acc[r * WC + GC + c]);
          if (lane == (r * GC + c) % LG && c0 + c < inter) {
            act[(r0 + r) * inter + c0 + c] = g / (1.0 + exp(-g)) * up;
          }
        }
      }
    }
  }
}
