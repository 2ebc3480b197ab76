// A lane's share of RT x WC dot products of a lane group (LG consecutive lanes; sum them over
// the group with lane_group_sum): acc[r * WC + c] = the sum over the vec4 steps kk = lane,
// lane + LG, ... < k4 of row_in(xo[r] + kk) . t4(w[wo[c] + kk]), for rows r < nr (the others
// stay 0). UNR steps' weights are loaded before any is used (loads in flight), then the last
// k4 % (LG * UNR) steps one at a time. The including shader defines WC (weight rows a lane
// group reads), row_in(i) (its input's vec4 i), w_index(wo, kk) (where vec4 kk of the weight
// row at wo lies: wo + kk row by row) and the `w` binding.
const STEP: u32 = LG * UNR; // vec4 steps one pass of the lane group covers

fn lane_group_dots(
  wo: array<u32, WC>,
  xo: array<u32, RT>,
  nr: u32,
  k4: u32,
  lane: u32,
) -> array<f32, RT * WC> {
  var acc = array<f32, RT * WC>();
  let full = (k4 / STEP) * STEP;
  var kk = lane;
  while (kk < full) {
    var wv = array<vec4<f32>, UNR * WC>();
    for (var u = 0u; u < UNR; u++) {
      for (var c = 0u; c < WC; c++) {
        wv[u * WC + c] = t4(w[w_index(wo[c], kk + u * LG)]);
      }
    }
    for (var u = 0u; u < UNR; u++) {
      for (var r = 0u; r < RT; r++) {
        if (r < nr) {
          let xv = row_in(xo[r] + kk + u * LG);
          for (var c = 0u; c < WC; c++) {
            acc[r * WC + c] += dot(xv, wv[u * WC + c]);
          }
        }
      }
    }
    kk += STEP;
  }
  while (kk < k4) {
    for (var c = 0u; c < WC; c++) {
      let wc = t4(w[w_index(wo[c], kk)]);
      for (var r = 0u; r < RT; r++) {
        if (r < nr) {
          acc[r * WC + c] += dot(row_in(xo[r] + kk), wc);
        }
      }
    }
    kk += LG;
  }
  return acc;
}
