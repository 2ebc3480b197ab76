/**
 * Lane-group kernel variants (the decode forms of the GEMV and the MoE GEMMs): a lane group of
 * LG consecutive invocations owns GC output columns, splits the reduction dimension in vec4
 * steps with UNR loads in flight, applies each load to RT rows held in registers and meets
 * through subgroup shuffles (shaders/lib/lane_group_sum.wgsl). One form gives an f16 variant
 * (weights read as 32-bit words) and an f32 one.
 *
 * ```ts
 * laneGroupVariants("gemv_decode.wgsl", [["dec", { WG: 128, LG: 8, GC: 1, RT: 1, UNR: 8 }]]);
 * // [f16-dec, f32-dec]
 * ```
 */
import type { Variant } from "./kernel.ts";

/** The constants of a lane-group form. */
export interface LaneGroupConsts {
  readonly WG: number;
  readonly LG: number;
  readonly GC: number;
  readonly RT: number;
  readonly UNR: number;
  /** 1: one RT-row block a workgroup, the blocks in grid z (else every row in a loop). */
  readonly RB?: number;
}

/** `f16-FORM` and `f32-FORM` for each named form, over one shader file. */
export function laneGroupVariants(
  shader: string,
  forms: readonly (readonly [string, LaneGroupConsts])[],
): Variant[] {
  return forms.flatMap(([form, consts]) =>
    (["f16", "f32"] as const).map((dtype) => ({
      name: `${dtype}-${form}`,
      dtype,
      packed: dtype === "f16",
      consts: { RB: 0, ...consts },
      subgroups: true,
      minSubgroupSize: consts.LG,
      shader,
    }))
  );
}

/** Output columns one workgroup of a lane-group variant owns, or null for other variants. */
export function laneGroupColumns(v: Variant): number | null {
  const c = v.consts;
  return c?.LG ? (c.WG / c.LG) * c.GC : null;
}
