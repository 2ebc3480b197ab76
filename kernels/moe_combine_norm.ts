/**
 * moe_combine with the next layer's input RMSNorm fused: per token,
 * `residual[t, :] += sum_j topk_weights[t, j] * y[row_of[t, j], :]`, then
 * `out[t, :] = residual[t, :] * rsqrt(mean(residual[t, :]^2) + eps) * weight`, one workgroup
 * a token. A MoE layer followed by another layer ends with it, where moe_combine and that
 * layer's rmsnorm took two dispatches (the model's GpuModelOptions.fuseCombineNorm).
 * hidden must be a multiple of 4. With `write_f16` the normed rows also go to out16 in the
 * storage type (f16 in the f16 form, clamped to its range as cast_f16 writes them): the next
 * layer's tensor-core GEMM reads them with no cast_f16 dispatch; without `write_f32` only there
 * (`out` unwritten: where that GEMM reads nothing else).
 *
 * The f16 form takes 512 invocations a workgroup, one vec4 column each at Qwen3-30B-A3B's 2048:
 * on the H200 (2026-12-03, perf-decode, two processes a form) 1 x 1024 4.37 / 4.38 ms of GPU
 * against 4.44 / 4.44 with 256, 8 x 1024 11.42 / 11.37 against 11.53 / 11.49, 64 x 1024 27.11 /
 * 27.12 against 27.22 / 27.23; 1024 invocations read the same as 512 within 0.07 ms.
 *
 * ```ts
 * const p = moeCombineNormParams(tokens, 2048, 8, 1e-6, true); // out16 too
 * const { residual, out } = moeCombineNormRef(residual0, y, rowOf, weights, normWeight, p);
 * ```
 */
import type { Gpu } from "../src/gpu/device.ts";
import type { HostArray, KernelCase } from "./case.ts";
import { grid1d, type KernelSpec, unsupportedReason, variantByName } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import {
  COMBINE_BINDINGS,
  COMBINE_CASE_SHAPES,
  combineCaseInputs,
  combineCaseLabel,
  type CombineCaseShape,
  moeCombineParams,
  moeCombineRef,
  withY16Rows,
  Y16_ROWS_SUFFIX,
} from "./moe_combine.ts";
import { rmsnormRef } from "./rmsnorm.ts";

const params = defineParams({
  tokens: "u32",
  hidden: "u32",
  top_k: "u32",
  eps: "f32",
  write_f16: "u32",
  /** The normed rows in f32 into `out` (0: left out, where only the f16 rows are read). */
  write_f32: "u32",
  /** Split-K partial sums of the o projection the residual still owes (0: none, o_part unread). */
  partials: "u32",
});

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_combine_norm",
  shader: "moe_combine_norm.wgsl",
  params,
  bindings: [
    ...COMBINE_BINDINGS,
    { name: "weight", type: "T", access: "read", shape: "[hidden] (the norm's)" },
    { name: "out", type: "f32", access: "read_write", shape: "[tokens, hidden]" },
    {
      name: "out16",
      type: "vec4<T>",
      access: "read_write",
      shape: "[tokens, hidden / 4] (written where write_f16; any buffer else)",
    },
  ],
  variants: [
    { name: "f32", dtype: "f32", consts: { WG: 256, Y16: 0 } },
    { name: "f16", dtype: "f16", consts: { WG: 512, Y16: 0 } },
    // where a workgroup takes at most 256 invocations (moeCombineNormVariant)
    { name: "f16-wg256", dtype: "f16", consts: { WG: 256, Y16: 0 } },
    // the f16 forms reading y as f16 (the down GEMM's -y16 twins write it so)
    { name: "f16" + Y16_ROWS_SUFFIX, dtype: "f16", consts: { WG: 512, Y16: 1 } },
    { name: "f16-wg256" + Y16_ROWS_SUFFIX, dtype: "f16", consts: { WG: 256, Y16: 1 } },
  ],
  grid: (p, _v, gpu) => grid1d(p.tokens, gpu),
};

/** Validated params; throws naming the bad field. */
export function moeCombineNormParams(
  tokens: number,
  hidden: number,
  topK: number,
  eps: number,
  writeF16 = false,
  partials = 0,
  writeF32 = true,
): ParamValues<typeof params.fields> {
  moeCombineParams(tokens, hidden, topK, partials);
  if (!(eps > 0)) throw new Error(`moe_combine_norm: eps = ${eps} must be positive`);
  if (!writeF32 && !writeF16) {
    throw new Error("moe_combine_norm: the normed rows must go somewhere (write_f32 or write_f16)");
  }
  return {
    tokens,
    hidden,
    top_k: topK,
    eps,
    write_f16: writeF16 ? 1 : 0,
    write_f32: writeF32 ? 1 : 0,
    partials,
  };
}

/** CPU reference: moeCombineRef's new residual (the partial sums in it), then rmsnormRef of it. */
export function moeCombineNormRef(
  residual: Float32Array,
  y: Float32Array,
  rowOf: Uint32Array,
  weights: Float32Array,
  normWeight: Float32Array,
  p: ParamValues<typeof params.fields>,
  part?: Float32Array,
): { residual: Float32Array; out: Float32Array } {
  const next = moeCombineRef(residual, y, rowOf, weights, p, part);
  return { residual: next, out: rmsnormRef(next, normWeight, p.tokens, p.hidden, p.eps) };
}

function combineNormCase(
  shape: CombineCaseShape,
  writeF16 = false,
  writeF32 = true,
): KernelCase<typeof params.fields> {
  const { tokens, hidden, topK } = shape;
  const p = moeCombineNormParams(
    tokens,
    hidden,
    topK,
    1e-6,
    writeF16,
    shape.partials ?? 0,
    writeF32,
  );
  const rows = tokens * topK;
  // without write_f32, `out` holds a sentinel the kernel must leave as it is
  const sentinel = () => new Float32Array(tokens * hidden).fill(-7.25);
  return {
    label: `${combineCaseLabel(shape)}${writeF16 ? " +f16 rows" : ""}${
      writeF32 ? "" : ", no f32 rows"
    }`,
    params: p,
    inputs: (rng) => ({
      ...combineCaseInputs(rng, shape),
      weight: rng.fillUniform(new Float32Array(hidden), 0.5, 1.5),
      // not written without write_f16: any 16 bytes
      ...(writeF16 ? {} : { out16: new Float32Array(4) }),
      ...(writeF32 ? {} : { out: sentinel() }),
    }),
    outputs: writeF16 ? { out: tokens * hidden, out16: tokens * hidden } : { out: tokens * hidden },
    reference: (inp) => {
      const r = moeCombineNormRef(
        inp.residual as Float32Array,
        inp.y as Float32Array,
        inp.row_of as Uint32Array,
        inp.topk_weights as Float32Array,
        inp.weight as Float32Array,
        p,
        inp.o_part as Float32Array,
      );
      const want: Record<string, HostArray> = {
        residual: r.residual,
        out: writeF32 ? r.out : sentinel(),
      };
      if (writeF16) want.out16 = r.out;
      return want;
    },
    // (out16 in the f16 form: f16 rounding, 2^-11 of a value)
    tolerance: (v) =>
      writeF16 && v.dtype === "f16" ? { atol: 1e-5, rtol: 1e-3 } : { atol: 1e-5, rtol: 1e-4 },
    // out and the residual are f32 in every form, computed in f32: the f32 bound
    bindingTolerances: () => ({
      out: { atol: 1e-5, rtol: 1e-4 },
      residual: { atol: 1e-5, rtol: 1e-4 },
    }),
    bytes: (v) => {
      const t = v.dtype === "f16" ? 2 : 4;
      return tokens * hidden * (8 + (writeF32 ? 4 : 0) + (writeF16 ? t : 0) + 4 * topK +
            4 * p.partials) + rows * 8 + hidden * t;
    },
    flops: rows * hidden * 2 + tokens * hidden * 4,
  };
}

const NAMES = spec.variants.map((v) => v.name);

export const cases = [
  ...COMBINE_CASE_SHAPES.map((s) => [s, combineNormCase(s)] as const),
  [COMBINE_CASE_SHAPES[2], combineNormCase(COMBINE_CASE_SHAPES[2], true)] as const,
  [COMBINE_CASE_SHAPES[4], combineNormCase(COMBINE_CASE_SHAPES[4], true)] as const,
  // the f16 rows alone (the next layer's tensor-core GEMM reads nothing else)
  [COMBINE_CASE_SHAPES[2], combineNormCase(COMBINE_CASE_SHAPES[2], true, false)] as const,
  [COMBINE_CASE_SHAPES[4], combineNormCase(COMBINE_CASE_SHAPES[4], true, false)] as const,
].flatMap(([s, c]) => withY16Rows(c, NAMES, s.tokens * s.topK * s.hidden));

/**
 * The variant the model takes for `dtype`: its own, or f16's form of 256 invocations where the
 * device's workgroups take fewer than 512.
 */
export function moeCombineNormVariant(gpu: Gpu, dtype: "f16" | "f32"): string {
  if (dtype === "f32" || unsupportedReason(gpu, variantByName(spec, "f16")) === null) return dtype;
  return "f16-wg256";
}
