/** Row gather `out[i, :] = x[rows[i], :]` (f32), e.g. the rows a step samples from. */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({ count: "u32", width: "u32" });

export const spec: KernelSpec<typeof params.fields> = {
  name: "gather_rows",
  shader: "gather_rows.wgsl",
  params,
  bindings: [
    { name: "x", type: "f32", access: "read", shape: "[rows of x, width]" },
    { name: "rows", type: "i32", access: "read", shape: "[count]" },
    { name: "out", type: "f32", access: "read_write", shape: "[count, width]" },
  ],
  variants: [{ name: "f32", dtype: "f32", consts: { WG: 64 } }],
  grid: (p, _v, gpu) => grid1d(p.count, gpu),
};

/** CPU reference. */
export function gatherRowsRef(x: Float32Array, rows: Int32Array, width: number): Float32Array {
  const out = new Float32Array(rows.length * width);
  rows.forEach((r, i) => out.set(x.subarray(r * width, (r + 1) * width), i * width));
  return out;
}

function gatherCase(xRows: number, count: number, width: number): KernelCase<typeof params.fields> {
  return {
    label: `${count} of ${xRows} rows x ${width}`,
    params: { count, width },
    inputs: (rng) => ({
      x: rng.fillNormal(new Float32Array(xRows * width)),
      rows: new Int32Array(count).map(() => rng.int(0, xRows)),
    }),
    outputs: { out: count * width },
    reference: (inp) => ({
      out: gatherRowsRef(inp.x as Float32Array, inp.rows as Int32Array, width),
    }),
    tolerance: () => ({ atol: 0, rtol: 0 }),
    bytes: () => count * width * 8 + count * 4,
    flops: 0,
  };
}

export const cases = [gatherCase(5, 2, 7), gatherCase(37, 9, 65), gatherCase(4096, 128, 2048)];
