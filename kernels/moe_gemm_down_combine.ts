/**
 * The MoE down GEMM with the combine fused, for steps whose expert rows are each one token's
 * (batch-1 decode; any step gives the right sums, but re-reads an expert's weights for every
 * token routed to it):
 * `residual[t, :] += sum_j topk_weights[t, j] * (act[row_of[t, j]] . w[topk_ids[t, j], :, :])`,
 * where `w` is `[experts, hidden, inter]`. Workgroup (column block, token) owns GC columns; its
 * lane groups take the token's ranks, read their experts' weight rows in words (the lane-group
 * decode forms' loop, lib/lane_group_dots.wgsl) and meet in workgroup memory in rank-group
 * order (deterministic). One dispatch where moe_gemm_down and moe_combine take two, with no y
 * rows written and read back; the next layer's input RMSNorm then runs in its qkv GEMV
 * (gemv_norm) instead of the combine. A row_of outside the rows adds nothing.
 *
 * ```ts
 * const p = moeGemmDownCombineParams({ tokens: 1, topK: 8, hidden: 2048, inter: 768 });
 * const residual = moeGemmDownCombineRef(inputs, p); // the new residual rows
 * ```
 */
import { expertTilesFit, tiledVariant } from "./expert_tiles.ts";
import { fitting, type KernelCase } from "./case.ts";
import { type KernelSpec, type Variant, variantByName } from "./kernel.ts";
import { laneGroupVariants, wideWordsFit } from "./lane_group_variants.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { MOE_NO_ROW, moeDispatchParams, moeDispatchRef, sampleRouting } from "./moe_dispatch.ts";
import { Rng } from "../src/util/rng.ts";
import { withPartials } from "./moe_router_norm.ts";

const params = defineParams({
  tokens: "u32",
  top_k: "u32",
  hidden: "u32",
  inter: "u32",
  partials: "u32",
  /** 1: also write h (the next layer's weighted input) and ss_part (its blocks' squares). */
  norm_next: "u32",
});

/**
 * The forms: `dc` (lane groups of 8, one column: every adapter with subgroups of 8 or more),
 * and whole 32-wide subgroups a rank, 4 or 2 columns a lane group with 3 loads in flight a
 * column (the per-lane loads of the batch-1 down form, dec-w32c4u3r1), 8 lane groups a
 * workgroup (one rank each at top-8) or 4 (`-wg128`: two ranks each, one after the other).
 */
const FORMS = [
  ["dc", { WG: 64, LG: 8, GC: 1, RT: 1, UNR: 4 }],
  ["dc-w32c4", { WG: 256, LG: 32, GC: 4, RT: 1, UNR: 3 }],
  ["dc-w32c2", { WG: 256, LG: 32, GC: 2, RT: 1, UNR: 3 }],
  ["dc-w32c4-wg128", { WG: 128, LG: 32, GC: 4, RT: 1, UNR: 3 }],
] as const;

/** f16 and f32 forms, the f16 ones also reading 16-byte words (`-ww`), and their tiled twins. */
function variants(): Variant[] {
  const forms = laneGroupVariants(
    "moe_gemm_down_combine.wgsl",
    FORMS,
    FORMS.map(([name]) => name),
  ).map((v) => ({ ...v, workgroupBytes: 4 * (v.consts!.WG / v.consts!.LG) * v.consts!.GC }));
  return [...forms, ...forms.filter((v) => v.dtype === "f16").map(tiledVariant)];
}

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_gemm_down_combine",
  shader: "moe_gemm_down_combine.wgsl",
  params,
  bindings: [
    { name: "act", type: "vec4<f32>", access: "read", shape: "[rows, inter/4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[experts, hidden, inter/4]" },
    { name: "topk_ids", type: "u32", access: "read", shape: "[tokens, top_k]" },
    { name: "topk_weights", type: "f32", access: "read", shape: "[tokens, top_k]" },
    { name: "row_of", type: "u32", access: "read", shape: "[tokens, top_k] -> row of act" },
    {
      name: "o_part",
      type: "f32",
      access: "read",
      shape: "[partials, tokens, hidden] (the residual's split-K partial sums, or unread)",
    },
    { name: "residual", type: "f32", access: "read_write", shape: "[tokens, hidden]" },
    {
      name: "norm_next",
      type: "vec4<T>",
      access: "read",
      shape: "[hidden / 4] (the next layer's input norm weight, or unread)",
    },
    {
      name: "h",
      type: "f32",
      access: "read_write",
      shape: "[tokens, hidden]: residual * norm_next (written where norm_next)",
    },
    {
      name: "ss_part",
      type: "f32",
      access: "read_write",
      shape: "[tokens, column blocks]: each block's sum of squares (written where norm_next)",
    },
  ],
  expertWeights: { binding: "w", rows: (p) => p.hidden, cols: (p) => p.inter },
  variants: variants(),
  grid: (p, v) => {
    const blocks = Math.ceil(p.hidden / (v.consts?.GC ?? 1));
    if (blocks > 65535 || p.tokens > 65535) {
      throw new Error(`moe_gemm_down_combine/${v.name}: grid ${blocks} x ${p.tokens} too large`);
    }
    return [blocks, p.tokens, 1];
  },
};

/** Sums of squares a token leaves in ss_part with `v` (norm_next): one a block of GC columns. */
export function downCombineSquareParts(v: Variant, hidden: number): number {
  return Math.ceil(hidden / (v.consts?.GC ?? 1));
}

/**
 * The next layer's inputs the kernel leaves with norm_next, from the new residual `[tokens,
 * hidden]`: h = residual * normNext, and each block of `gc` columns' sum of squares (f64).
 */
export function nextNormRef(
  residual: Float32Array,
  normNext: Float32Array,
  tokens: number,
  hidden: number,
  gc: number,
): { h: Float32Array; ss_part: Float32Array } {
  const h = new Float32Array(tokens * hidden);
  const blocks = Math.ceil(hidden / gc);
  const ss = new Float32Array(tokens * blocks);
  for (let t = 0; t < tokens; t++) {
    for (let c = 0; c < hidden; c++) {
      const v = residual[t * hidden + c];
      h[t * hidden + c] = v * normNext[c];
      ss[t * blocks + Math.floor(c / gc)] += v * v;
    }
  }
  return { h, ss_part: ss };
}

/** The fused kernel's shape. */
export interface MoeDownCombineShape {
  readonly tokens: number;
  readonly topK: number;
  readonly hidden: number;
  readonly inter: number;
  /** Split-K partial sums the residual owes (default 0). */
  readonly partials?: number;
  /** Also write h and ss_part for the next layer's gemv_scaled (default false). */
  readonly normNext?: boolean;
}

/** Validated params; throws naming the bad field. */
export function moeGemmDownCombineParams(
  s: MoeDownCombineShape,
): ParamValues<typeof params.fields> {
  if (!Number.isInteger(s.inter) || s.inter < 4 || s.inter % 4) {
    throw new Error(`moe_gemm_down_combine: inter = ${s.inter} must be a positive multiple of 4`);
  }
  if (!Number.isInteger(s.hidden) || s.hidden < 1) {
    throw new Error(`moe_gemm_down_combine: hidden = ${s.hidden} must be a positive integer`);
  }
  if (s.normNext && s.hidden % 8 !== 0) {
    throw new Error(
      `moe_gemm_down_combine: hidden = ${s.hidden} must be a multiple of 8 with the next norm ` +
        "(its weight is read in words)",
    );
  }
  if (!Number.isInteger(s.topK) || s.topK < 1) {
    throw new Error(`moe_gemm_down_combine: top_k = ${s.topK} must be a positive integer`);
  }
  if (!Number.isInteger(s.tokens) || s.tokens < 0) {
    throw new Error(`moe_gemm_down_combine: tokens = ${s.tokens} must be a count`);
  }
  const partials = s.partials ?? 0;
  if (!Number.isInteger(partials) || partials < 0) {
    throw new Error(`moe_gemm_down_combine: partials = ${partials} must be a count`);
  }
  return {
    tokens: s.tokens,
    top_k: s.topK,
    hidden: s.hidden,
    inter: s.inter,
    partials,
    norm_next: s.normNext ? 1 : 0,
  };
}

/** The host data the kernel reads (f32 weights `[experts, hidden, inter]`, row by row). */
export interface MoeDownCombineInputs {
  readonly act: Float32Array;
  readonly w: Float32Array;
  readonly topk_ids: Uint32Array;
  readonly topk_weights: Float32Array;
  readonly row_of: Uint32Array;
  readonly o_part: Float32Array;
  readonly residual: Float32Array;
  readonly norm_next: Float32Array;
}

/**
 * CPU reference: the new residual `[tokens, hidden]` (the partial sums added to it in order in
 * f32, each rank's dot product and the weighted sum over ranks in f64, then one f32 add).
 */
export function moeGemmDownCombineRef(
  inp: MoeDownCombineInputs,
  p: ParamValues<typeof params.fields>,
): Float32Array {
  const { tokens, top_k: k, hidden, inter } = p;
  const rows = tokens * k;
  const out = withPartials(inp.residual, inp.o_part, p.partials, tokens * hidden);
  for (let t = 0; t < tokens; t++) {
    for (let c = 0; c < hidden; c++) {
      let s = 0;
      for (let j = 0; j < k; j++) {
        const row = inp.row_of[t * k + j];
        if (row === MOE_NO_ROW || row >= rows) continue;
        const ao = row * inter, wo = (inp.topk_ids[t * k + j] * hidden + c) * inter;
        let dot = 0;
        for (let q = 0; q < inter; q++) dot += inp.act[ao + q] * inp.w[wo + q];
        s += inp.topk_weights[t * k + j] * dot;
      }
      out[t * hidden + c] += s;
    }
  }
  return out;
}

function downCombineCase(
  shape: MoeDownCombineShape & {
    readonly experts: number;
    readonly dropOne?: boolean;
    /** Route to (and store the weights of) experts 0 .. stored - 1 only (big shapes). */
    readonly stored?: number;
  },
  note = "",
  only?: readonly string[],
  /** With shape.normNext, the forms of this many columns a block alone (ss_part's layout). */
  gc = 0,
): KernelCase<typeof params.fields> {
  const { tokens, topK, hidden, inter } = shape;
  const experts = shape.stored ?? shape.experts;
  const p = moeGemmDownCombineParams(shape);
  const label = `tokens=${tokens} E=${shape.experts} k=${topK} hidden=${hidden} inter=${inter}${
    shape.dropOne ? " one dropped" : ""
  }${experts === shape.experts ? "" : ` experts 0..${experts - 1} stored`}${
    p.partials ? ` + ${p.partials} partial sums` : ""
  }${p.norm_next ? ` + next norm, blocks of ${gc}` : ""} ${note}`.trim();
  const blocks = Math.ceil(hidden / Math.max(1, gc));
  const rows = tokens * topK;
  // the routing the gate/up GEMM left: ids, and act rows in expert-sorted order (row_of)
  const ids = sampleRouting(Rng.fromSeed(`routing/${label}`), tokens, experts, topK, "spread");
  const d = moeDispatchRef(
    ids,
    moeDispatchParams({ tokens, topK, experts, gridXGateUp: 1, gridXDown: 1 }),
  );
  if (shape.dropOne) d.rowOf[rows - 1] = MOE_NO_ROW;
  const touched = new Set(ids).size;
  return {
    label,
    params: p,
    inputs: (rng) => ({
      act: rng.fillNormal(new Float32Array(rows * inter)),
      w: rng.fillUniform(
        new Float32Array(experts * hidden * inter),
        -Math.sqrt(3 / inter),
        Math.sqrt(3 / inter),
      ),
      topk_ids: new Uint32Array(ids),
      topk_weights: rng.fillUniform(new Float32Array(rows), 0, 1),
      row_of: d.rowOf,
      o_part: rng.fillNormal(new Float32Array(Math.max(1, p.partials) * tokens * hidden)),
      residual: rng.fillNormal(new Float32Array(tokens * hidden)),
      norm_next: Float32Array.from({ length: hidden }, () => rng.int(4, 17) / 8),
      // (unwritten without norm_next)
      ...(p.norm_next ? {} : { h: new Float32Array(4), ss_part: new Float32Array(4) }),
    }),
    outputs: p.norm_next ? { h: tokens * hidden, ss_part: tokens * blocks } : {},
    reference: (inp) => {
      const residual = moeGemmDownCombineRef(inp as unknown as MoeDownCombineInputs, p);
      if (!p.norm_next) return { residual };
      const next = nextNormRef(residual, inp.norm_next as Float32Array, tokens, hidden, gc);
      return { residual, ...next };
    },
    tolerance: () => ({ atol: 2e-4, rtol: 2e-4 }),
    bytes: (v) =>
      touched * hidden * inter * (v.dtype === "f16" ? 2 : 4) + rows * inter * 4 + rows * 12 +
      tokens * hidden * (8 + 4 * p.partials),
    flops: rows * 2 * hidden * inter + rows * hidden * 2,
    ...(only ? { variants: only } : fitting(
      spec.variants,
      (v) =>
        (!v.expertTiles || expertTilesFit(hidden, inter)) && wideWordsFit(v, inter) &&
        (!p.norm_next || v.consts?.GC === gc),
    )),
  };
}

/** The forms the model takes at Qwen3-30B-A3B's and Mixtral's shapes (16-byte words, tiles). */
const PRODUCTION = spec.variants.filter((v) => v.wideWords).map((v) => v.name);

export const cases = [
  downCombineCase({ tokens: 1, experts: 8, topK: 2, hidden: 64, inter: 32 }),
  // inter / 4 = 66: the unrolled loop, then its one-step tail; 3 ranks over 8 or 4 lane groups
  downCombineCase({ tokens: 3, experts: 8, topK: 3, hidden: 36, inter: 264, dropOne: true }),
  // more ranks than lane groups (dc: 8 groups; -wg128: 4), a ragged column block
  downCombineCase({ tokens: 1, experts: 16, topK: 10, hidden: 70, inter: 48 }),
  // whole tiles of 16 rows x 64 columns (the tiled twins)
  downCombineCase({ tokens: 2, experts: 8, topK: 2, hidden: 64, inter: 192 }),
  // the o projection's split-K partial sums
  downCombineCase({ tokens: 2, experts: 8, topK: 3, hidden: 37, inter: 64, partials: 3 }),
  downCombineCase(
    { tokens: 1, experts: 128, topK: 8, hidden: 2048, inter: 768, stored: 8, partials: 4 },
    "qwen3-30b-a3b",
    PRODUCTION,
  ),
  // the next layer's weighted input and its blocks' squares (gemv_scaled's), each block size
  ...[1, 2, 4].map((gc) =>
    downCombineCase(
      { tokens: 2, experts: 8, topK: 3, hidden: 72, inter: 64, normNext: true },
      "",
      undefined,
      gc,
    )
  ),
  downCombineCase(
    { tokens: 1, experts: 128, topK: 8, hidden: 2048, inter: 768, stored: 8, normNext: true },
    "qwen3-30b-a3b",
    PRODUCTION.filter((n) => variantByName(spec, n).consts?.GC === 4),
    4,
  ),
];
