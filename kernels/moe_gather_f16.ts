/**
 * The f16 operand of the tensor-core expert GEMMs: the token rows in expert-sorted order
 * (`out[r] = f16(x[sorted_token[r]])` for the step's `work_items[0].y` rows), then zero rows
 * up to `rows_pad` (the row tiles, up to 128 rows, of the last work item read past its end), clamped to
 * f16's finite range as cast_f16 does. hidden must be a multiple of 4.
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { moeTcRouting } from "./moe_tc_routing.ts";
import { clampF16, roundToF16InPlace } from "../src/util/f16.ts";
import { type RoutingPattern, WORK_ITEMS_READ } from "./moe_dispatch.ts";

const params = defineParams({ hidden: "u32", rows_pad: "u32" });
const WG = 256;
const MAX_WORKGROUPS = 4096;

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_gather_f16",
  shader: "moe_gather_f16.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[tokens, hidden/4]" },
    { name: "sorted_token", type: "u32", access: "read", shape: "[rows] row -> token" },
    WORK_ITEMS_READ,
    { name: "out", type: "vec4<T>", access: "read_write", shape: "[rows_pad, hidden/4]" },
  ],
  variants: [{ name: "f16", dtype: "f16", consts: { WG } }],
  grid: (p, _v, gpu) =>
    grid1d(Math.min(MAX_WORKGROUPS, Math.ceil((p.rows_pad * p.hidden) / 4 / WG)), gpu),
};

/** Validated params; throws naming the bad field. */
export function moeGatherF16Params(
  hidden: number,
  rowsPad: number,
): ParamValues<typeof params.fields> {
  if (!Number.isInteger(hidden) || hidden < 4 || hidden % 4) {
    throw new Error(`moe_gather_f16: hidden = ${hidden} must be a positive multiple of 4`);
  }
  if (!Number.isInteger(rowsPad) || rowsPad < 0) {
    throw new Error(`moe_gather_f16: rows_pad = ${rowsPad} must be an integer >= 0`);
  }
  return { hidden, rows_pad: rowsPad };
}

function gatherCase(
  tokens: number,
  experts: number,
  topK: number,
  hidden: number,
  pattern: RoutingPattern,
): KernelCase<typeof params.fields> {
  const r = moeTcRouting(tokens, experts, topK, pattern, `hidden=${hidden}`);
  return {
    label: r.label,
    params: moeGatherF16Params(hidden, r.rowsPad),
    inputs: (rng) => ({
      x: rng.fillNormal(new Float32Array(tokens * hidden), 2),
      sorted_token: r.sortedToken,
      work_items: r.workItems,
    }),
    outputs: { out: r.rowsPad * hidden },
    reference: (inp) => {
      const x = inp.x as Float32Array;
      const out = new Float32Array(r.rowsPad * hidden);
      for (let row = 0; row < r.rows; row++) {
        const t = r.sortedToken[row];
        out.set(x.subarray(t * hidden, (t + 1) * hidden), row * hidden);
      }
      return { out: roundToF16InPlace(clampF16(out)) };
    },
    tolerance: () => ({ atol: 0, rtol: 0 }),
    bytes: () => r.rows * hidden * 4 + r.rowsPad * hidden * 2 + r.rows * 4,
    flops: 0,
  };
}

export const cases = [
  gatherCase(1, 8, 2, 8, "spread"),
  // an odd row count (37 rows + 128 padding)
  gatherCase(37, 8, 1, 132, "skewed"),
  gatherCase(256, 128, 8, 2048, "spread"),
];
