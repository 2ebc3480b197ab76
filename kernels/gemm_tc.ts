/**
 * Tensor-core GEMM `c[m, n] (+)= sum_k a[m, k] * b[n, k]` (b in the Linear layout
 * [out, in]): f16 16 x 16 x 16 subgroup matrices with f32 accumulation, both operands
 * loaded straight from memory. `a` is the f16 copy of the activations that `cast_f16`
 * writes (or a kernel that writes the operand itself), with rows up to the variant's row tile
 * (`gemmTcRowsPad`; zeros from cast_f16, else stale: rows past m are not stored); n and k
 * must be multiples of 16. A workgroup (one subgroup of 32) owns TM rows x 64 columns of c:
 * `f16-tc16` (1 x 4 tiles, the most workgroups: decode-sized row counts), `f16-tc32`,
 * `f16-tc64` (4 x 4 tiles, the most reuse: prefill). Split-K: with `k_split < k` workgroup z
 * sums its k_split of the reduction into slice z of c (`[splits, m, n]`, no accumulate) and
 * `splitk_reduce` adds the slices: decode-sized steps have too few (row, column) tiles to
 * keep the GPU's subgroups busy. The staged forms `f16-tcs16`, `f16-tcs32` and `f16-tcs64`
 * (gemm_tcs.wgsl, decode-sized row counts) read both operands as 16-byte words through
 * workgroup memory: a workgroup owns TM rows x 32 columns and steps 64 of k at a time, so k
 * and k_split must be multiples of 64 there (`gemmTcKStep`). `f16-tcs32x2`, `f16-tcs64x4` and
 * `f16-tcs128x8` (gemm_tcs_sg.wgsl) stage the same way with 2, 4 or 8 subgroups a workgroup,
 * one row tile of 16 each, so the 32 weight rows a step stages feed every row tile; their
 * forms with column groups `f16-tcs<TM>x<RT>w<CW>` (GEMM_TCS_WIDE_VARIANTS, the LM head's) have
 * CW / 32 subgroups a row tile, so the TM rows of `a` a step stages feed CW weight rows. The
 * `-a32` twins of the decode-sized forms (GEMM_TC_A32) read `a` as the f32 activations and
 * round them to f16 as they stage them, so no cast_f16 runs before them.
 */
import { fitting, type KernelCase } from "./case.ts";
import type { KernelSpec, Variant } from "./kernel.ts";
import { linearRef } from "./gemv.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { clampF16, roundToF16InPlace } from "../src/util/f16.ts";

const params = defineParams({
  m: "u32",
  n: "u32",
  k: "u32",
  accumulate: "u32",
  k_split: "u32",
});

/**
 * The wide-words forms declare `a` and `b` read_write (still 16-byte words): on the H200's
 * Vulkan driver (session 35, perf-decode profile of 64 x 1024, two runs each way) a step's qkv
 * linears took 1287 µs against 1494 read-only, o 1131 against 1263, the LM head 370 against 450
 * (b alone read_write: 1325, 1146, 431); perf-prefill read 0.6-1.3% faster (with the MoE
 * GEMMs' operands read_write too).
 */
const READ_WRITE: readonly string[] = Object.freeze(["a", "b"]);

function tcVariant(tm: 16 | 32 | 64): Variant {
  return {
    name: `f16-tc${tm}`,
    dtype: "f16",
    subgroupMatrix: { m: 16, n: 16, k: 16 },
    consts: { MT: tm / 16, TM: tm },
  };
}

/**
 * A staged form that reads `a` as the f32 activations (A32, lib/a_words.wgsl) and
 * rounds them to f16 as it stages them: no cast_f16 before it. Named `<form>-a32`.
 */
function a32(v: Variant): Variant {
  return { ...v, name: `${v.name}-a32`, f32Inputs: ["a"], consts: { ...v.consts, A32: 1 } };
}

/** The staged form with `rt` subgroups a workgroup, one row tile of 16 each. */
function stagedSubgroupsVariant(rt: 2 | 4 | 8): Variant {
  return {
    name: `f16-tcs${16 * rt}x${rt}`,
    dtype: "f16",
    subgroupMatrix: { m: 16, n: 16, k: 16 },
    perSubgroupMatrices: true,
    shader: "gemm_tcs_sg.wgsl",
    wideWords: true,
    readWrite: READ_WRITE,
    consts: { RT: rt, TM: 16 * rt, CS: 1, CW: 32, A32: 0 },
  };
}

/**
 * The staged several-subgroup form whose `rt` x `cs` subgroups take `rt` row tiles of 16 and
 * `cs` column groups of 32 (CW = 32 cs columns a workgroup): `f16-tcs<TM>x<rt>w<CW>`, the LM
 * head's forms (GEMM_TCS_WIDE_VARIANTS).
 */
function stagedColumnsVariant(rt: 1 | 2 | 4 | 8, cs: 2 | 4 | 8): Variant {
  return {
    name: `f16-tcs${16 * rt}x${rt}w${32 * cs}`,
    dtype: "f16",
    subgroupMatrix: { m: 16, n: 16, k: 16 },
    perSubgroupMatrices: true,
    shader: "gemm_tcs_sg.wgsl",
    wideWords: true,
    readWrite: READ_WRITE,
    consts: { RT: rt, TM: 16 * rt, CS: cs, CW: 32 * cs, A32: 0 },
  };
}

/**
 * The prefill form: WM x WN subgroups of 4 x 4 tiles (TM = 64 WM rows x CW = 64 WN columns a
 * workgroup), both operands staged through two buffers of workgroup memory, BK of k a step.
 * PF: the steps ahead whose words a lane holds in registers (1; the lab `p2` forms 2: two sets,
 * a word loaded two steps before it is staged, so a load has two steps' products to arrive in).
 */
function prefillVariant(wm: 1 | 2 | 4, wn: 1 | 2 | 4, bk: 16 | 32, pf: 1 | 2 = 1): Variant {
  return {
    name: `f16-tcp${64 * wm}x${64 * wn}${pf === 2 ? "p2" : ""}`,
    dtype: "f16",
    subgroupMatrix: { m: 16, n: 16, k: 16 },
    perSubgroupMatrices: true,
    shader: "gemm_tcp.wgsl",
    wideWords: true,
    readWrite: READ_WRITE,
    consts: { WM: wm, WN: wn, TM: 64 * wm, CW: 64 * wn, BK: bk, PF: pf },
  };
}

function stagedVariant(tm: 16 | 32 | 64): Variant {
  return {
    name: `f16-tcs${tm}`,
    dtype: "f16",
    subgroupMatrix: { m: 16, n: 16, k: 16 },
    shader: "gemm_tcs.wgsl",
    wideWords: true,
    readWrite: READ_WRITE,
    consts: { RT: tm / 16, TM: tm, CW: 32, A32: 0 },
  };
}

export const spec: KernelSpec<typeof params.fields> = {
  name: "gemm_tc",
  shader: "gemm_tc.wgsl",
  params,
  bindings: [
    {
      name: "a",
      type: "T",
      access: "read",
      shape: "[rows padded to TM, k] (cast_f16; -a32: the f32 rows)",
    },
    { name: "b", type: "T", access: "read", shape: "[n, k]" },
    { name: "c", type: "f32", access: "read_write", shape: "[m, n] (+= when accumulate)" },
  ],
  variants: [
    tcVariant(16),
    tcVariant(32),
    tcVariant(64),
    stagedVariant(16),
    stagedVariant(32),
    stagedVariant(64),
    stagedSubgroupsVariant(2),
    stagedSubgroupsVariant(4),
    stagedSubgroupsVariant(8),
    stagedColumnsVariant(1, 2),
    stagedColumnsVariant(1, 4),
    stagedColumnsVariant(1, 8),
    stagedColumnsVariant(2, 2),
    stagedColumnsVariant(2, 4),
    stagedColumnsVariant(2, 8),
    stagedColumnsVariant(4, 2),
    stagedColumnsVariant(4, 4),
    stagedColumnsVariant(8, 2),
    prefillVariant(1, 1, 16),
    prefillVariant(2, 1, 16),
    prefillVariant(1, 2, 16),
    prefillVariant(2, 2, 32),
    prefillVariant(4, 2, 16),
    prefillVariant(2, 4, 16),
    prefillVariant(4, 2, 16, 2),
    // the decode-sized forms reading the f32 activations (GEMM_TC_A32)
    a32(stagedVariant(16)),
    a32(stagedVariant(32)),
    a32(stagedSubgroupsVariant(2)),
    a32(stagedSubgroupsVariant(4)),
    a32(stagedSubgroupsVariant(8)),
  ],
  // the staged forms take the row blocks along x (those that read the same weights run side
  // by side), gemm_tc the column blocks
  grid: (p, v) => {
    const rows = Math.ceil(p.m / (v.consts?.TM ?? 64));
    const columns = Math.ceil(p.n / (v.consts?.CW ?? 64));
    const splits = Math.ceil(p.k / p.k_split);
    return v.wideWords ? [rows, columns, splits] : [columns, rows, splits];
  },
};

/** The largest row tile of the variants (f16-tcp256x128): pad `a` to it for any variant. */
export const MAX_ROW_TILE = 256;

/** Rows of `a` the variant reads for m rows of c: m rounded up to its row tile. */
export function gemmTcRowsPad(m: number, variant: Variant): number {
  const tm = variant.consts?.TM ?? 64;
  return Math.ceil(m / tm) * tm;
}

/** The tensor-core variants that load their matrices straight from memory (gemm_tc.wgsl). */
export const GEMM_TC_VARIANTS = ["f16-tc16", "f16-tc32", "f16-tc64"] as const;

/**
 * The staged variants (gemm_tcs.wgsl, one subgroup a workgroup; gemm_tcs_sg.wgsl, one
 * subgroup a row tile): decode-sized row counts.
 */
export const GEMM_TCS_VARIANTS = [
  "f16-tcs16",
  "f16-tcs32",
  "f16-tcs64",
  "f16-tcs32x2",
  "f16-tcs64x4",
  "f16-tcs128x8",
] as const;

/**
 * The staged forms with column groups (gemm_tcs_sg.wgsl with CS > 1): a workgroup stages TM rows
 * of a once for CW = 32 CS weight rows. For weights of very many rows and few rows of a (the LM
 * head: 151,936 x 2048), where the forms of 32 columns stage as many words of a as of the
 * weights.
 */
export const GEMM_TCS_WIDE_VARIANTS = [
  "f16-tcs16x1w64",
  "f16-tcs16x1w128",
  "f16-tcs16x1w256",
  "f16-tcs32x2w64",
  "f16-tcs32x2w128",
  "f16-tcs32x2w256",
  "f16-tcs64x4w64",
  "f16-tcs64x4w128",
  "f16-tcs128x8w64",
] as const;

/**
 * The least k a split of a staged form takes by default: 1024 for the several-subgroup decode
 * forms of 4 and 8 subgroups, 512 (8 of their steps) for `f16-tcs32x2` and the one-subgroup
 * ones, 256 for the prefill forms (f16-tcp*) where they take decode-sized steps. On the H200
 * (2026-12-01) 512 and 2048 were slower for the several-subgroup forms at 32-128 rows, 1024 and
 * 2048 for the one-subgroup ones at 16 rows (20.44 against 20.96 and 21.90 ms at 16 x 1024);
 * tcp128x128 in splits of 256 took 128 x 1024 from 47.56 to 45.90 ms, tcp64x128 in splits of
 * 512 to 46.06. Since the several-subgroup forms store their sums straight to memory
 * (cfd5cc7), `f16-tcs32x2` took o at 32 rows (k 4096) in 16.0 µs a layer in 8 splits of 512
 * against 20.0 in 4 of 1024, and qkv (k 2048) 21.9 in 4 against 21.5 in 2 (perf-linear,
 * `session16_call6`).
 */
export function stagedSplitMinK(variant: Variant): number {
  if (isPrefillForm(variant)) return 256;
  if (!variant.perSubgroupMatrices) return 512;
  return variant.consts?.RT === 2 ? 512 : 1024;
}

/**
 * The prefill forms (gemm_tcp.wgsl: several subgroups of 4 x 4 tiles, double-buffered staging):
 * prefill-sized row counts.
 */
export const GEMM_TCP_VARIANTS = [
  "f16-tcp64x64",
  "f16-tcp128x64",
  "f16-tcp64x128",
  "f16-tcp128x128",
  "f16-tcp256x128",
  "f16-tcp128x256",
  "f16-tcp256x128p2",
] as const;

/**
 * The forms with a twin that reads the f32 activations (`<form>-a32`): the staged forms of
 * decode-sized steps, where a cast_f16 dispatch before each linear layer costs more than its
 * work. On the H200 (2026-12-02, perf-linear, Qwen3-30B-A3B's qkv and o) each twin itself ran
 * 2-7% slower than its form (converting as it stages), and tcp128x128's 13% slower (qkv at 128
 * rows 35.7 -> 40.5 µs a layer), which took 128 x 1024 decode steps from 34.0 to 34.9 ms: it has
 * no twin. In the model, GpuModelOptions.tensorCoreF32InputRows.
 */
export const GEMM_TC_A32 = [
  "f16-tcs16",
  "f16-tcs32",
  "f16-tcs32x2",
  "f16-tcs64x4",
  "f16-tcs128x8",
] as const;

/** The f32-input twin of a form (GEMM_TC_A32), or null where it has none. */
export function a32Twin(name: string): string | null {
  return (GEMM_TC_A32 as readonly string[]).includes(name) ? `${name}-a32` : null;
}

/** Whether a variant is a prefill form (GEMM_TCP_VARIANTS). */
export function isPrefillForm(variant: Variant): boolean {
  return (GEMM_TCP_VARIANTS as readonly string[]).includes(variant.name);
}

/** The k a variant steps at a time: k and k_split must be multiples of it. */
export function gemmTcKStep(variant: Variant): number {
  return variant.consts?.BK ?? (variant.wideWords ? 64 : 16);
}

/** Whether an n x k weight fits the tensor-core GEMM (both multiples of 16). */
export function gemmTcFits(n: number, k: number): boolean {
  return n >= 16 && k >= 16 && n % 16 === 0 && k % 16 === 0;
}

/** Validated params; throws naming the bad field. */
export function gemmTcParams(
  m: number,
  n: number,
  k: number,
  accumulate: boolean,
  splits = 1,
  kStep = 16,
): ParamValues<typeof params.fields> {
  if (!gemmTcFits(n, k)) {
    throw new Error(`gemm_tc: n = ${n} and k = ${k} must be positive multiples of 16`);
  }
  if (k % kStep !== 0) {
    throw new Error(`gemm_tc: k = ${k} must be a multiple of the variant's k step ${kStep}`);
  }
  if (!Number.isInteger(m) || m < 0) throw new Error(`gemm_tc: m = ${m} must be an integer >= 0`);
  const kSplit = gemmTcSplitK(k, splits, kStep);
  if (kSplit < k && accumulate) {
    throw new Error("gemm_tc: split-K writes partial sums; splitk_reduce accumulates");
  }
  return { m, n, k, accumulate: accumulate ? 1 : 0, k_split: kSplit };
}

/** The k of one split for about `splits` splits: a multiple of kStep (k itself for 1). */
export function gemmTcSplitK(k: number, splits: number, kStep = 16): number {
  if (!Number.isInteger(splits) || splits < 1) {
    throw new Error(`gemm_tc: splits = ${splits} must be an integer >= 1`);
  }
  return Math.ceil(k / kStep / splits) * kStep;
}

/**
 * Splits for m x n on a variant: none while the (row, column) tiles already give `target`
 * workgroups, else the fewest powers of two up to `max` that do, keeping at least
 * `minSlices` 16-wide k slices a split.
 */
export function gemmTcSplits(
  m: number,
  n: number,
  k: number,
  variant: Variant,
  target: number,
  max = 16,
  minSlices = 8,
): number {
  const tiles = Math.ceil(n / (variant.consts?.CW ?? 64)) *
    Math.ceil(m / (variant.consts?.TM ?? 64));
  let s = 1;
  while (tiles * s < target && s * 2 <= max && k / 16 / (s * 2) >= minSlices) s *= 2;
  return s;
}

function tcCase(
  m: number,
  n: number,
  k: number,
  accumulate = false,
  splits = 1,
  kStep = 16,
): KernelCase<typeof params.fields> {
  // every variant reads up to the largest row tile: pad for that one
  const rowsPad = Math.ceil(m / MAX_ROW_TILE) * MAX_ROW_TILE;
  const p = gemmTcParams(m, n, k, accumulate, splits, kStep);
  const slices = Math.ceil(k / p.k_split);
  // the staged forms step 64 of k, the prefill forms 16 or 32: shapes a form cannot take
  // compare on the others only
  return {
    label: `m=${m} n=${n} k=${k}${accumulate ? " c+=" : ""}${slices > 1 ? ` split ${slices}` : ""}`,
    params: p,
    ...fitting(spec.variants, (v) => {
      const step = gemmTcKStep(v);
      return k % step === 0 && p.k_split % step === 0;
    }),
    inputs: (rng) => {
      const a = new Float32Array(rowsPad * k);
      a.set(rng.fillNormal(new Float32Array(m * k)));
      return {
        a,
        b: rng.fillNormal(new Float32Array(n * k), 1 / Math.sqrt(k)),
        ...(accumulate ? { c: rng.fillNormal(new Float32Array(m * n)) } : {}),
      };
    },
    outputs: accumulate ? {} : { c: slices * m * n },
    reference: (inp) => {
      const c0 = accumulate ? inp.c as Float32Array : undefined;
      // a and b arrive rounded to f16 (T bindings; the -a32 twins take a as drawn and round it
      // themselves, as here); the products accumulate in f32
      const a = roundToF16InPlace(new Float32Array(inp.a as Float32Array));
      if (slices === 1) return { c: linearRef(a, inp.b as Float32Array, m, n, k, c0) };
      return { c: splitPartialsRef(a, inp.b as Float32Array, m, n, k, p.k_split) };
    },
    tolerance: () => ({ atol: 2e-4, rtol: 2e-4 }),
    bytes: () => n * k * 2 + m * k * 2 + m * n * 4 * (accumulate ? 2 : 1),
    flops: 2 * m * n * k,
  };
}

/**
 * A case for the -a32 twins alone: `a` as f32 values with exactly m rows (the twins read no row
 * past m - 1) and two outliers past f16's range, which the twins clamp to its largest finite
 * value as cast_f16 does; the reference clamps and rounds `a` the same way.
 */
function a32Case(
  m: number,
  n: number,
  k: number,
  splits: number,
): KernelCase<typeof params.fields> {
  const base = tcCase(m, n, k, false, splits, 64);
  const twins = GEMM_TC_A32.map((name) => `${name}-a32`);
  const p = base.params;
  const slices = Math.ceil(k / p.k_split);
  return {
    ...base,
    label: `${base.label} f32 a, outliers`,
    variants: twins,
    inputs: (rng) => {
      const a = rng.fillNormal(new Float32Array(m * k));
      a[0] = 1e6;
      a[k + 3] = -7e4;
      return { a, b: rng.fillNormal(new Float32Array(n * k), 1 / Math.sqrt(k)) };
    },
    reference: (inp) => {
      const a = roundToF16InPlace(clampF16(new Float32Array(inp.a as Float32Array)));
      const b = inp.b as Float32Array;
      return {
        c: slices === 1 ? linearRef(a, b, m, n, k) : splitPartialsRef(a, b, m, n, k, p.k_split),
      };
    },
    // the outliers' products reach 65504 |b|: relative to them
    tolerance: () => ({ atol: 2e-4, rtol: 2e-4 }),
  };
}

/** Split-K partial sums: slice z = a[:, z ks .. (z+1) ks] . b[:, same]^T, [splits, m, n]. */
function splitPartialsRef(
  a: Float32Array,
  b: Float32Array,
  m: number,
  n: number,
  k: number,
  ks: number,
): Float32Array {
  const slices = Math.ceil(k / ks);
  const out = new Float32Array(slices * m * n);
  for (let z = 0; z < slices; z++) {
    const k0 = z * ks, k1 = Math.min(k, k0 + ks);
    for (let r = 0; r < m; r++) {
      for (let c = 0; c < n; c++) {
        let s = 0;
        for (let i = k0; i < k1; i++) s += a[r * k + i] * b[c * k + i];
        out[(z * m + r) * n + c] = s;
      }
    }
  }
  return out;
}

export const cases = [
  tcCase(1, 16, 16),
  // a partial row block, n not a multiple of 64 (the last column tiles clamped, not stored)
  tcCase(37, 80, 48),
  tcCase(70, 144, 112, true),
  tcCase(64, 128, 2048, true),
  // split-K: k 112 in 3 splits of 48 (the last one short: 16), and the decode qkv shape
  tcCase(19, 96, 112, false, 3),
  tcCase(64, 5120, 2048, false, 8),
  // Qwen3-30B-A3B: qkv at 64 decode rows, o (accumulating) and a prefill-sized square
  tcCase(64, 5120, 2048),
  tcCase(130, 2048, 4096, true),
  tcCase(1024, 1024, 1024),
  tcCase(2000, 2048, 2048),
  // the staged forms' shapes: a partial row tile and a half column block (n 80), splits of
  // 64 (the last one short), several row blocks, accumulate; Qwen3-30B-A3B's o at 32 rows in
  // 8 splits and the router's 128 columns at 9 rows
  tcCase(9, 80, 128),
  tcCase(37, 144, 192, false, 3, 64),
  tcCase(100, 48, 256, true),
  tcCase(32, 2048, 4096, false, 8, 64),
  tcCase(9, 128, 2048, false, 16, 64),
  // the several-subgroup staged forms at Qwen3-30B-A3B's decode shapes: qkv at 64 rows in 4
  // splits, o at 128 rows in 8 (one row block of tcs128x8, two of tcs64x4)
  tcCase(64, 5120, 2048, false, 4, 64),
  tcCase(128, 2048, 4096, false, 8, 64),
  // ... and past 64 rows, as decodeSplits takes them since session 45 (two row blocks of
  // tcs64x4): qkv at 96 rows unsplit, o at 96 rows in 2 splits
  tcCase(96, 5120, 2048),
  tcCase(96, 2048, 4096, false, 2, 64),
  // decode steps of 2-8 rows (on the staged forms since session 21): qkv at 8 rows in 4
  // splits, o at 2 rows in 8
  tcCase(8, 5120, 2048, false, 4, 64),
  tcCase(2, 2048, 4096, false, 8, 64),
  // split-K past 128 rows (prefillSplits): the router at a 2048-token prefill in 8 splits of
  // 256, and a partial row block in 2
  tcCase(2048, 128, 2048, false, 8, 32),
  tcCase(200, 128, 512, false, 2, 32),
  // the prefill form's decode rule (decodeSplits: one wave): qkv at 128 rows in 3 splits of 704
  tcCase(128, 5120, 2048, false, 3, 32),
  // a partial row tile, half a column block, 2 splits of 512 and 256; an accumulating one
  tcCase(5, 80, 768, false, 2, 256),
  tcCase(13, 48, 512, true),
  // the forms with column groups (GEMM_TCS_WIDE_VARIANTS): n cutting a workgroup's columns
  // inside its first group (400 = 3 x 128 + 16), accumulate, and an LM head's k at 64 rows
  tcCase(8, 400, 256),
  tcCase(21, 208, 192, true),
  tcCase(64, 4096, 2048),
  // the -a32 twins alone: unrounded f32 activations of exactly m rows, values past f16's range
  a32Case(5, 48, 256, 2),
  a32Case(19, 64, 512, 1),
];
