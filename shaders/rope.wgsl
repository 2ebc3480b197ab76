// Rotary position embedding, rotate-half (GPT-NeoX / Hugging Face Qwen3, Mixtral) form,
// in place on x [tokens, heads, head_dim], with angles from a host-computed table
// cos_sin[pos, 0:half] = cos, cos_sin[pos, half:2 half] = sin (f64 on the host, so deep
// positions keep full precision): (x_i, x_{i+h}) <- (x_i c - x_{i+h} s, x_{i+h} c + x_i s).
@compute @workgroup_size(WG)
fn main(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let half = params.head_dim / 2u;
  let idx = gid.x + gid.y * nwg.x * WG;
  if (idx >= params.tokens * params.heads * half) {
    return;
  }
  let i = idx % half;
  let th = idx / half;
  let t = th / params.heads;
  let base = th * params.head_dim;
  let table = u32(positions[t]) * params.head_dim;
  let c = cos_sin[table + i];
  let s = cos_sin[table + half + i];
  let x1 = x[base + i];
  let x2 = x[base + i + half];
  x[base + i] = x1 * c - x2 * s;
  x[base + i + half] = x2 * c + x1 * s;
}
