// out[r, :] = f16(x[sorted_token[r], :]) for the step's expert-sorted rows r (work_items[0].y
// of them), zero for the rows after them up to rows_pad: the f16 operand the tensor-core
// expert GEMM (moe_gemm_gate_up_tc) loads straight from memory, a work item's 64 rows at a
// time (so up to 63 rows past the last item are read: rows_pad covers them). One vec4 an
// invocation, grid-stride.
//#include "lib/clamp_f16.wgsl"

@compute @workgroup_size(WG)
fn main(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let h4 = params.hidden / 4u;
  let rows = work_items[0].y;
  let total = params.rows_pad * h4;
  let stride = nwg.x * nwg.y * WG;
  for (var i = gid.x + gid.y * nwg.x * WG; i < total; i += stride) {
    let r = i / h4;
    var v = vec4<f32>(0.0);
    if (r < rows) {
      v = x[sorted_token[r] * h4 + i % h4];
    }
    out[i] = vec4<T>(clamp_f16(v));
  }
}
