/**
 * The decode forms of the grouped expert GEMMs (gate/up and down): weight-bound kernels
 * for a few rows per expert, in which a lane group of LG invocations owns GC output
 * columns, splits the reduction dimension in vec4 steps with UNR loads in flight, applies
 * each load to RT rows held in registers and meets through subgroup shuffles. `dec` is for
 * about one row per expert (small batches: more loads in flight), `dec8` for up to eight.
 * f16 weights are read as 32-bit words (`packed`).
 */
import type { Variant } from "./kernel.ts";

const SMALL = { WG: 128, LG: 8, GC: 1, RT: 4, UNR: 4 } as const;
const WIDE = { WG: 128, LG: 8, GC: 2, RT: 8, UNR: 2 } as const;

/** The four decode variants (f16 and f32, `dec` and `dec8`) over one shader file. */
export function moeDecodeVariants(shader: string): Variant[] {
  const common = { subgroups: true, minSubgroupSize: SMALL.LG, shader } as const;
  return [
    { name: "f16-dec", dtype: "f16", packed: true, consts: SMALL, ...common },
    { name: "f16-dec8", dtype: "f16", packed: true, consts: WIDE, ...common },
    { name: "f32-dec", dtype: "f32", consts: SMALL, ...common },
    { name: "f32-dec8", dtype: "f32", consts: WIDE, ...common },
  ];
}

/**
 * Output columns one workgroup of a grouped-GEMM variant owns: (WG / LG) * GC for the
 * decode forms, RPW for the staged and subgroup forms, `tiled` for the tiled form.
 */
export function moeColumnsPerWorkgroup(v: Variant, tiled: number): number {
  const c = v.consts;
  if (c?.LG) return (c.WG / c.LG) * c.GC;
  return c?.RPW ?? tiled;
}
