// lib/lane_group_dots.wgsl's hooks for the MoE down GEMM's decode forms (moe_gemm_down_decode,
// moe_gemm_down_combine): the weights are the experts' down rows (row by row or in tiles,
// lib/expert_tiles.wgsl), the x rows the gate/up GEMM's activations.

// word kk (WV vec4s of weights) of the expert weight row at wo, row by row or in tiles
fn w_index(wo: u32, kk: u32) -> u32 {
  return wo + tile_unit(kk, WV);
}

fn row_in(i: u32) -> vec4<f32> {
  return act[i];
}
