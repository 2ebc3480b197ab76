// The router's order of experts: by logit, ties to the lower expert index. An expert's rank is
// the number of experts ranked ahead of it, so every rank below top_k names exactly one expert.
// Whether expert j (logit u) is ranked ahead of expert e (logit v).
fn ranked_ahead(u: f32, j: u32, v: f32, e: u32) -> bool {
  return u > v || (u == v && j < e);
}
