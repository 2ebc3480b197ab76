/**
 * Lane-group kernel variants (the decode forms of the GEMV and the MoE GEMMs): a lane group of
 * LG consecutive invocations owns GC output columns, splits the reduction dimension in weight
 * words with UNR loads in flight, applies each load to RT rows held in registers and meets
 * through subgroup shuffles (shaders/lib/lane_group_sum.wgsl, lib/lane_group_dots.wgsl). One
 * form gives an f16 variant (weights read as 8-byte words of 4 values, `packed`), an f32 one
 * and, where asked, an f16 one reading 16-byte words of 8 values (`-ww`, `wideWords`).
 *
 * ```ts
 * laneGroupVariants("gemv_decode.wgsl", [["dec", { WG: 128, LG: 8, GC: 1, RT: 1, UNR: 8 }]]);
 * // [f16-dec, f32-dec]
 * laneGroupVariants("moe_gemm_down_decode.wgsl", [["dec", { WG: 128, LG: 8, GC: 1, RT: 4, UNR: 4 }]], ["dec"]);
 * // [f16-dec, f32-dec, f16-dec-ww]
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

/**
 * `f16-FORM` and `f32-FORM` for each named form, over one shader file, and for the forms named
 * in `wide`, `f16-FORM-ww`: the f16 form reading its weights as 16-byte words of 8 values
 * (`wideWords`) where the f16 form reads 8-byte ones (`packed`); its reduction width must be a
 * multiple of 8 (wideWordsFit).
 */
export function laneGroupVariants(
  shader: string,
  forms: readonly (readonly [string, LaneGroupConsts])[],
  wide: readonly string[] = [],
): Variant[] {
  return forms.flatMap(([form, consts]) => {
    const base = {
      consts: { RB: 0, ...consts },
      subgroups: true,
      minSubgroupSize: consts.LG,
      shader,
    };
    return [
      { ...base, name: `f16-${form}`, dtype: "f16" as const, packed: true },
      { ...base, name: `f32-${form}`, dtype: "f32" as const, packed: false },
      ...(wide.includes(form)
        ? [{ ...base, name: `f16-${form}-ww`, dtype: "f16" as const, wideWords: true }]
        : []),
    ];
  });
}

/** Whether a form reads a reduction width of `k` values: a wide-words form needs 8 a word. */
export function wideWordsFit(v: Variant, k: number): boolean {
  return !v.wideWords || k % 8 === 0;
}

/** Output columns one workgroup of a lane-group variant owns, or null for other variants. */
export function laneGroupColumns(v: Variant): number | null {
  const c = v.consts;
  return c?.LG ? (c.WG / c.LG) * c.GC : null;
}
