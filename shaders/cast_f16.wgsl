// out[r, :] = f16(x[r, :]) for r < rows, 0 for rows <= r < rows_pad: the f16 copy of an
// activation that the tensor-core GEMM (gemm_tc) reads straight from memory, padded with
// zero rows to its row tile so that its loads never leave the buffer. One vec4 an
// invocation, grid-stride.
//#include "lib/clamp_f16.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let w4 = params.width / 4u;
  let total = params.rows_pad * w4;
  let stride = nwg.x * nwg.y * WG;
  for (var i = gid.x + gid.y * nwg.x * WG; i < total; i += stride) {
    var v = vec4<f32>(0.0);
    if (i / w4 < params.rows) {
      v = x[i];
    }
    out[i] = vec4<T>(clamp_f16(v));
  }
}
