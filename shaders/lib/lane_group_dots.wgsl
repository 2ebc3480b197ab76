// A lane's share of RT x WC dot products of a lane group (LG consecutive lanes; sum them over
// the group with lane_group_sum): acc[r * WC + c] = the sum over the weight words kk = lane,
// lane + LG, ... < kw of row_in(xo[r] + WV kk + h) . tw(w[wo[c] + kk], h), h < WV, for rows
// r < nr (the others stay 0). A word is WV vec4s of weights (the prelude's TW: 4 values as 8
// bytes where packed, 8 as 16 bytes where the form reads wide words). UNR steps' weights are
// loaded before any is used (loads in flight), then the last kw % (LG * UNR) words one at a
// time. The including shader defines WC (weight rows a lane group reads), row_in(i) (its
// input's vec4 i), w_index(wo, kk) (where word kk of the weight row at wo lies: wo + kk row by
// row) and the `w` binding. Each row converts the word itself (tw per row): converting it once
// into an array applied to every row (9acb709) ran 1.5-5.5% slower on the H200 (1 x 1024 4.36
// ms against 4.12, 32 x 1024 22.8 against 21.5; session 37), the same arithmetic.
const STEP: u32 = LG * UNR; // words one pass of the lane group covers

fn lane_group_dots(
  wo: array<u32, WC>,
  xo: array<u32, RT>,
  nr: u32,
  kw: u32,
  lane: u32,
) -> array<f32, RT * WC> {
  var acc = array<f32, RT * WC>();
  let full = (kw / STEP) * STEP;
  var kk = lane;
  while (kk < full) {
    var wv = array<TW, UNR * WC>();
    for (var u = 0u; u < UNR; u++) {
      for (var c = 0u; c < WC; c++) {
        wv[u * WC + c] = w[w_index(wo[c], kk + u * LG)];
      }
    }
    for (var u = 0u; u < UNR; u++) {
      for (var h = 0u; h < WV; h++) {
        for (var r = 0u; r < RT; r++) {
          if (r < nr) {
            let xv = row_in(xo[r] + WV * (kk + u * LG) + h);
            for (var c = 0u; c < WC; c++) {
              acc[r * WC + c] += dot(xv, tw(wv[u * WC + c], h));
            }
          }
        }
      }
    }
    kk += STEP;
  }
  while (kk < kw) {
    for (var c = 0u; c < WC; c++) {
      let wc = w[w_index(wo[c], kk)];
      for (var h = 0u; h < WV; h++) {
        for (var r = 0u; r < RT; r++) {
          if (r < nr) {
            acc[r * WC + c] += dot(row_in(xo[r] + WV * kk + h), tw(wc, h));
          }
        }
      }
    }
    kk += LG;
  }
  return acc;
}
