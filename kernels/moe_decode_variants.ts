/**
 * The decode forms of the grouped expert GEMMs (gate/up and down): weight-bound kernels
 * for a few rows per expert, in which a lane group of LG invocations owns GC output
 * columns, splits the reduction dimension in weight words with UNR loads in flight, applies
 * each load to RT rows held in registers and meets through subgroup shuffles. `dec` (lanes of
 * 8) and `dec-w32` (32, more loads in flight) hold 4 rows a pass, `dec8` 8 rows and 2 columns
 * a lane group; moeGemmVariantFor picks among them by rows per expert.
 * f16 weights are read as 8-byte words (`packed`), or as 16-byte ones by the `-ww` twins of
 * MOE_WIDE_WORD_FORMS.
 */
import type { Variant } from "./kernel.ts";
import { laneGroupColumns, laneGroupVariants } from "./lane_group_variants.ts";
import { tiledVariant } from "./expert_tiles.ts";

/**
 * The lane-group forms that also read their f16 weights as 16-byte words (`f16-FORM-ww`): the
 * three the model takes at 1-2 rows an expert (moeGemmVariantFor, where the H200's figures
 * are), and `dec`, whose 8-lane groups let adapters with 8-wide subgroups (lavapipe) check the
 * 16-byte-word path (the model takes `dec-ww` only when asked, e.g. `--moe-gate-up dec-ww`).
 */
const MOE_WIDE_WORD_FORMS = ["dec", "dec-w32c2", "dec-w32c4u3r1", "dec-w32c2u3r2"];

/**
 * The decode variants over one shader file, f16 and f32 (and MOE_WIDE_WORD_FORMS' f16 twins
 * reading 16-byte words): `dec`, `dec-w32` (a whole 32-wide
 * subgroup per column: more loads in flight where few experts are touched) and `dec8`.
 */
export function moeDecodeVariants(shader: string): Variant[] {
  const forms = laneGroupVariants(shader, [
    ["dec", { WG: 128, LG: 8, GC: 1, RT: 4, UNR: 4 }],
    ["dec-w32", { WG: 128, LG: 32, GC: 1, RT: 4, UNR: 2 }],
    ["dec8", { WG: 128, LG: 8, GC: 2, RT: 8, UNR: 2 }],
    // candidates for the H200 (2026-11-30): gate/up read at 47% and down at 33% of the roof
    // at 64 x 1024 with dec-w32 / dec8. dec8c4: 4 columns a lane group of 8 (down's short
    // rows, 768 wide: more loads in flight, half the workgroups); dec-w32c2: 2 columns a
    // subgroup (each x load serves 2 columns).
    ["dec8c4", { WG: 128, LG: 8, GC: 4, RT: 8, UNR: 1 }],
    ["dec-w32c2", { WG: 128, LG: 32, GC: 2, RT: 4, UNR: 2 }],
    // dec-w32 with 8 subgroups a workgroup: the rows' x values come from L2 once per 8
    // columns instead of 4 (gate/up past 4 rows an expert: 128 x 1024 step 103.7 -> 94.2 ms)
    ["dec-w32-wg256", { WG: 256, LG: 32, GC: 1, RT: 4, UNR: 2 }],
    // down's short rows (768 wide: 192 8-byte words, 6 a lane; the -ww twins' 96 16-byte words
    // take one round): UNR 3 walks them in 2 dependent
    // rounds of 3 loads a column where UNR 2 took 3 rounds of 2, RT at most 2 with fewer
    // registers a lane. H200 (2026-12-02, perf-decode
    // --moe-down, GPU ms at 1 / 8 / 16 / 32 x 1024 against dec-w32c2's 5.54 / 13.04 / 18.04 /
    // 26.20): dec-w32c4u3r1 (4 columns, 1 row a pass) 5.24 / 12.47 / 17.34 / 25.67,
    // dec-w32c2u3r2 5.40 / 12.65 / 17.38 / 25.20 (dec, the 2-row default before, 26.45 at 32)
    ["dec-w32c4u3r1", { WG: 128, LG: 32, GC: 4, RT: 1, UNR: 3 }],
    ["dec-w32c2u3r2", { WG: 128, LG: 32, GC: 2, RT: 2, UNR: 3 }],
  ], MOE_WIDE_WORD_FORMS);
  // the f16 forms again reading the expert weights in tiles (kernels/expert_tiles.ts)
  return [...forms, ...forms.filter((v) => v.dtype === "f16").map(tiledVariant)];
}

/**
 * Output columns one workgroup of a grouped-GEMM variant owns: (WG / LG) * GC for the
 * decode forms, RPW for the staged and subgroup forms, `tiled` for the tiled form.
 */
export function moeColumnsPerWorkgroup(v: Variant, tiled: number): number {
  return laneGroupColumns(v) ?? v.consts?.RPW ?? tiled;
}

/** MOE_PRODUCTION_VARIANTS of the row-by-row layout. */
const ROW_PRODUCTION_VARIANTS = [
  "f16",
  "f16-sg",
  "f16-staged",
  "f16-sg-packed",
  "f16-staged-packed",
  "f16-dec",
  "f16-dec-w32",
  "f16-dec-w32c2",
  "f16-dec-w32-wg256",
  "f16-dec-w32c4u3r1",
  "f16-dec-w32c2u3r2",
  "f16-dec8",
  "f16-dec8c4",
  // 16-byte words: the forms the model takes at 1-32 tokens, and dec
  "f16-dec-ww",
  "f16-dec-w32c2-ww",
  "f16-dec-w32c4u3r1-ww",
  "f16-dec-w32c2u3r2-ww",
];

/**
 * The variants both grouped GEMMs validate at production shapes: f16 only (the storage type on
 * GPUs with shader-f16), every form the model may choose (moeGemmVariantFor) and the others
 * that have a production use.
 */
export const MOE_PRODUCTION_VARIANTS: readonly string[] = [
  ...ROW_PRODUCTION_VARIANTS,
  // the decode forms' tiled twins
  ...ROW_PRODUCTION_VARIANTS.filter((n) => n.startsWith("f16-dec")).map((n) => `${n}-t16`),
];
