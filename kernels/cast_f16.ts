/**
 * f32 activations to f16 for the tensor-core GEMM (`gemm_tc`), which loads its left
 * operand straight from memory as f16: `out[r] = f16(x[r])` for the `rows` rows, zero rows
 * up to `rows_pad` (the GEMM's row tile), so its loads stay inside the buffer and padded
 * rows produce zeros. Values past f16's range are clamped to its largest finite value (an
 * outlier stays finite instead of turning the products into inf and NaN). width must be a
 * multiple of 4.
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { clampF16, roundToF16InPlace } from "../src/util/f16.ts";

const params = defineParams({ rows: "u32", rows_pad: "u32", width: "u32" });
const WG = 256;
/** Workgroups at most: a grid-stride loop covers the rest. */
const MAX_WORKGROUPS = 4096;

export const spec: KernelSpec<typeof params.fields> = {
  name: "cast_f16",
  shader: "cast_f16.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[rows, width/4]" },
    { name: "out", type: "vec4<T>", access: "read_write", shape: "[rows_pad, width/4]" },
  ],
  variants: [{ name: "f16", dtype: "f16", consts: { WG } }],
  grid: (p, _v, gpu) =>
    grid1d(Math.min(MAX_WORKGROUPS, Math.ceil((p.rows_pad * p.width) / 4 / WG)), gpu),
};

/** Validated params; throws naming the bad field. */
export function castF16Params(
  rows: number,
  rowsPad: number,
  width: number,
): ParamValues<typeof params.fields> {
  if (!Number.isInteger(width) || width < 4 || width % 4) {
    throw new Error(`cast_f16: width = ${width} must be a positive multiple of 4`);
  }
  if (!Number.isInteger(rows) || rows < 0 || !Number.isInteger(rowsPad) || rowsPad < rows) {
    throw new Error(`cast_f16: rows_pad = ${rowsPad} must be an integer >= rows = ${rows}`);
  }
  return { rows, rows_pad: rowsPad, width };
}

function castCase(rows: number, rowsPad: number, width: number): KernelCase<typeof params.fields> {
  return {
    label: `rows=${rows} pad=${rowsPad} width=${width}`,
    params: castF16Params(rows, rowsPad, width),
    inputs: (rng) => {
      const x = rng.fillNormal(new Float32Array(rows * width), 3);
      // outliers past f16's range: clamped to its largest finite value, not inf
      x[0] = 1e6;
      if (x.length > 5) x[5] = -7e4;
      return { x };
    },
    outputs: { out: rowsPad * width },
    // the comparison reads the f16 output back as f32: the reference is x clamped to f16's
    // range and rounded, then zeros
    reference: (inp) => {
      const out = new Float32Array(rowsPad * width);
      out.set(roundToF16InPlace(clampF16(new Float32Array(inp.x as Float32Array))));
      return { out };
    },
    tolerance: () => ({ atol: 0, rtol: 0 }),
    bytes: () => rows * width * 4 + rowsPad * width * 2,
    flops: 0,
  };
}

export const cases = [
  castCase(1, 16, 8),
  castCase(37, 64, 132),
  castCase(300, 320, 2048),
  // more elements than the workgroup cap covers in one pass (grid-stride)
  castCase(2000, 2048, 4096),
];
