// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i]   (SwiGLU activation of a fused
// gate|up projection)
@compute @workgroup_size(WG)
fn main(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let idx = gid.x + gid.y * nwg.x * WG;
  if (idx >= params.tokens * params.inter) {
    return;
  }
  let t = idx / params.inter;
  let i = idx % params.inter;
  let g = gate_up[t * 2u * params.inter + i];
  let u = gate_up[t * 2u * params.inter + params.inter + i];
  out[idx] = g / (1.0 + exp(-g)) * u;
}
