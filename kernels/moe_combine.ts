/**
 * MoE combine with the residual add fused, in place on the residual stream:
 * `residual[t, :] += sum_j topk_weights[t, j] * y[row_of[t, j], :]`, where y is the down
 * GEMM's output in expert-sorted rows and row_of comes from moe_dispatch. The k terms are
 * summed in j order (no float atomics), so the result is deterministic.
 * hidden must be a multiple of 4. The `-y16` forms read y as f16 from `y16` instead (the down
 * GEMM's -y16 twins write it so: half the bytes).
 */
import { type KernelCase, splitForTwins } from "./case.ts";
import type { Rng } from "../src/util/rng.ts";
import { type BindingSpec, grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams, type ParamFields, type ParamValues } from "./params.ts";
import { MOE_NO_ROW, moeDispatchParams, moeDispatchRef, sampleRouting } from "./moe_dispatch.ts";
import { withPartials } from "./moe_router_norm.ts";

const params = defineParams({
  tokens: "u32",
  hidden: "u32",
  top_k: "u32",
  /** Split-K partial sums of the o projection the residual still owes (0: none, o_part unread). */
  partials: "u32",
});
const WG = 256;

/** The combine's bindings (moe_combine_norm's first four too). */
export const COMBINE_BINDINGS: readonly BindingSpec[] = [
  { name: "y", type: "vec4<f32>", access: "read", shape: "[tokens * top_k, hidden/4]" },
  { name: "row_of", type: "u32", access: "read", shape: "[tokens, top_k] -> row of y" },
  { name: "topk_weights", type: "f32", access: "read", shape: "[tokens, top_k]" },
  { name: "residual", type: "vec4<f32>", access: "read_write", shape: "[tokens, hidden/4]" },
  {
    name: "o_part",
    type: "vec4<f32>",
    access: "read",
    shape: "[partials, tokens, hidden/4] (the residual's split-K partial sums; any buffer at 0)",
  },
  {
    name: "y16",
    type: "vec4<T>",
    access: "read",
    shape: "[tokens * top_k, hidden/4] (y in f16, read by the -y16 forms; any buffer else)",
  },
];

/** The name suffix of the combines' forms that read y as f16 from `y16` (Y16 = 1). */
export const Y16_ROWS_SUFFIX = "-y16";

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_combine",
  shader: "moe_combine.wgsl",
  params,
  bindings: COMBINE_BINDINGS,
  variants: [
    { name: "f32", dtype: "f32", consts: { WG, Y16: 0 } },
    { name: "f16-y16", dtype: "f16", consts: { WG, Y16: 1 } },
  ],
  grid: (p, _v, gpu) => grid1d(Math.ceil((p.tokens * p.hidden) / 4 / WG), gpu),
};

/** Validated params; throws naming the bad field. */
export function moeCombineParams(
  tokens: number,
  hidden: number,
  topK: number,
  partials = 0,
): ParamValues<typeof params.fields> {
  if (!Number.isInteger(hidden) || hidden < 4 || hidden % 4) {
    throw new Error(`moe_combine: hidden = ${hidden} must be a positive multiple of 4`);
  }
  if (!Number.isInteger(topK) || topK < 1) throw new Error(`moe_combine: top_k = ${topK}`);
  if (!Number.isInteger(tokens) || tokens < 0) throw new Error(`moe_combine: tokens = ${tokens}`);
  if (!Number.isInteger(partials) || partials < 0) {
    throw new Error(`moe_combine: partials = ${partials} must be a count`);
  }
  return { tokens, hidden, top_k: topK, partials };
}

/**
 * CPU reference: the new residual `[tokens, hidden]` (with p.partials > 0 and `part`, the partial
 * sums added to it first, in order in f32; then the f64 sum over j, in one f32 add).
 */
export function moeCombineRef(
  residual: Float32Array,
  y: Float32Array,
  rowOf: Uint32Array,
  weights: Float32Array,
  p: { tokens: number; hidden: number; top_k: number; partials?: number },
  part?: Float32Array,
): Float32Array {
  const { tokens, hidden, top_k: k } = p;
  const out = withPartials(residual, part, part ? p.partials ?? 0 : 0, tokens * hidden);
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < hidden; h++) {
      let s = 0;
      for (let j = 0; j < k; j++) {
        const row = rowOf[t * k + j];
        if (row !== MOE_NO_ROW) s += weights[t * k + j] * y[row * hidden + h];
      }
      out[t * hidden + h] += s;
    }
  }
  return out;
}

/** A combine case's shape (moe_combine and moe_combine_norm share them). */
export interface CombineCaseShape {
  readonly tokens: number;
  readonly hidden: number;
  readonly experts: number;
  readonly topK: number;
  readonly note?: string;
  /** The last assignment dropped (as moe_dispatch drops an expert id out of range). */
  readonly dropOne?: boolean;
  /** Split-K partial sums the residual still owes (the o projection's; default 0). */
  readonly partials?: number;
}

/** The label of a combine case. */
export function combineCaseLabel(c: CombineCaseShape): string {
  return `tokens=${c.tokens} hidden=${c.hidden} E=${c.experts} k=${c.topK}${
    c.dropOne ? " one dropped" : ""
  }${c.partials ? ` + ${c.partials} partial sums` : ""} ${c.note ?? ""}`.trim();
}

/** The inputs of a combine case: y, row_of (from moe_dispatchRef), topk_weights, residual. */
export function combineCaseInputs(
  rng: Rng,
  c: CombineCaseShape,
): {
  y: Float32Array;
  row_of: Uint32Array;
  topk_weights: Float32Array;
  residual: Float32Array;
  o_part: Float32Array;
} {
  const { tokens, hidden, experts, topK } = c;
  const rows = tokens * topK;
  const ids = sampleRouting(rng, tokens, experts, topK, "spread");
  const d = moeDispatchRef(
    ids,
    moeDispatchParams({ tokens, topK, experts, gridXGateUp: 1, gridXDown: 1 }),
  );
  // A dropped assignment (expert id out of range in moe_dispatch) adds nothing.
  if (c.dropOne) d.rowOf[rows - 1] = MOE_NO_ROW;
  return {
    y: rng.fillNormal(new Float32Array(rows * hidden)),
    row_of: d.rowOf,
    topk_weights: rng.fillUniform(new Float32Array(rows), 0, 1),
    residual: rng.fillNormal(new Float32Array(tokens * hidden)),
    // (16 bytes, unread, without partials)
    o_part: rng.fillNormal(new Float32Array(Math.max(4, (c.partials ?? 0) * tokens * hidden))),
  };
}

function combineCase(shape: CombineCaseShape): KernelCase<typeof params.fields> {
  const { tokens, hidden, topK } = shape;
  const p = moeCombineParams(tokens, hidden, topK, shape.partials ?? 0);
  const rows = tokens * topK;
  return {
    label: combineCaseLabel(shape),
    params: p,
    inputs: (rng) => combineCaseInputs(rng, shape),
    outputs: {},
    reference: (inp) => ({
      residual: moeCombineRef(
        inp.residual as Float32Array,
        inp.y as Float32Array,
        inp.row_of as Uint32Array,
        inp.topk_weights as Float32Array,
        p,
        inp.o_part as Float32Array,
      ),
    }),
    tolerance: () => ({ atol: 1e-5, rtol: 1e-5 }),
    bytes: () => tokens * hidden * (8 + 4 * topK + 4 * p.partials) + rows * 8,
    flops: rows * hidden * 2,
  };
}

/**
 * A combine case as two: the forms of `names` that read y as f32 (y16 bound, unread), and the
 * -y16 forms, which read the same rows (`yValues` values) from y16, rounded to f16 on upload
 * (the reference takes them as y; y bound, unread).
 */
export function withY16Rows<F extends ParamFields>(
  c: KernelCase<F>,
  names: readonly string[],
  yValues: number,
): KernelCase<F>[] {
  return splitForTwins(c, names, (name) => name.endsWith(Y16_ROWS_SUFFIX), {
    inputs: (rng, v) => ({ ...c.inputs(rng, v), y16: new Float32Array(4) }),
  }, {
    label: `${c.label}, y as f16`,
    inputs: (rng, v) => {
      const inp = c.inputs(rng, v);
      return { ...inp, y16: inp.y, y: new Float32Array(4) };
    },
    reference: (inp, v) => c.reference({ ...inp, y: inp.y16 }, v),
    bytes: (v) => c.bytes(v) - 2 * yValues,
  });
}

/** The shapes moe_combine and moe_combine_norm are validated at. */
export const COMBINE_CASE_SHAPES: readonly CombineCaseShape[] = [
  { tokens: 1, hidden: 64, experts: 8, topK: 2 },
  { tokens: 5, hidden: 64, experts: 8, topK: 2 },
  { tokens: 37, hidden: 68, experts: 8, topK: 3, dropOne: true },
  { tokens: 1, hidden: 2048, experts: 128, topK: 8, note: "qwen3-30b-a3b" },
  { tokens: 64, hidden: 2048, experts: 128, topK: 8, note: "qwen3-30b-a3b" },
  { tokens: 1024, hidden: 2048, experts: 128, topK: 8, note: "qwen3-30b-a3b" },
  { tokens: 1, hidden: 4096, experts: 8, topK: 2, note: "mixtral-8x7b" },
  { tokens: 1024, hidden: 4096, experts: 8, topK: 2, note: "mixtral-8x7b" },
  { tokens: 5, hidden: 68, experts: 8, topK: 3, dropOne: true, partials: 3 },
  { tokens: 8, hidden: 2048, experts: 128, topK: 8, partials: 8, note: "qwen3-30b-a3b" },
];

export const cases = COMBINE_CASE_SHAPES.flatMap((s) =>
  withY16Rows(combineCase(s), spec.variants.map((v) => v.name), s.tokens * s.topK * s.hidden)
);
