// out[i, :] = x[rows[i], :]: the rows whose logits are sampled (the last token of each
// sequence), gathered before the final norm and the LM head.
@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let i = wid.x + wid.y * nwg.x;
  if (i >= params.count) {
    return;
  }
  let src = u32(rows[i]) * params.width;
  let dst = i * params.width;
  for (var c = lid; c < params.width; c += WG) {
    out[dst + c] = x[src + c];
  }
}
