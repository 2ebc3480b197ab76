// The indirect dispatch arguments of the expert GEMMs after routing: gate/up, then down, each
// params.grid_x_<gemm> column blocks by `items` work items. The including shader binds
// dispatch_args and has params.{grid_x_gate_up, grid_x_down}.
fn write_dispatch_args(items: u32) {
  dispatch_args[0] = params.grid_x_gate_up;
  dispatch_args[1] = items;
  dispatch_args[2] = 1u;
  dispatch_args[3] = params.grid_x_down;
  dispatch_args[4] = items;
  dispatch_args[5] = 1u;
}
