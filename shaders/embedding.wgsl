// out[t, :] = table[id(t), :] where id(t) = prev_sampled[prev_ref[t]] if prev_ref[t] >= 0
// else token_ids[t] (a decode step's input token may still be on the GPU).
@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let t = wid.x + wid.y * nwg.x;
  if (t >= params.tokens) {
    return;
  }
  let r = prev_ref[t];
  var id = token_ids[t];
  if (r >= 0) {
    id = prev_sampled[u32(r)];
  }
  let src = u32(id) * params.hidden;
  let dst = t * params.hidden;
  for (var i = lid; i < params.hidden; i += WG) {
    out[dst + i] = f32(table[src + i]);
  }
}
