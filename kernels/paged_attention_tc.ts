/**
 * Paged causal attention on f16 subgroup matrices (tensor cores): the same computation,
 * params, bindings' buffers and grid as paged_attention (prefill and any mix of
 * sequences, GQA, reading every key through the block tables), with Q K^T and P V as
 * 16 x 16 x 16 f16 products accumulated in f32.
 *
 * ```ts
 * // the params of paged_attention; head_dim = 128 and block_size a multiple of 16
 * pass.dispatchWorkgroups(...spec.grid(p, variantByName(spec, "f16-tc"), gpu));
 * ```
 *
 * Workgroup (q tile, seq, kv head), one subgroup of 32: ROWS = 16 query rows, floor(16 / G)
 * tokens x the G query heads of a kv head, as one 16-row matrix, so each K/V matrix loaded
 * serves the whole GQA group; q * scale as f16 stays in registers (8 left matrices). K and V
 * tiles of 16 keys are loaded straight from the paged cache (the 16 slots of a tile are
 * consecutive rows of one block, num_kv_heads * head_dim apart); S goes through workgroup
 * memory, where invocations 2r and 2r + 1 run row r's online softmax and write P as f16.
 * The running max is lazy: a row takes a new max only when a step's scores pass it by more
 * than 8, so P <= e^8 stays inside f16 and O (8 result matrices in registers) is rescaled
 * through workgroup memory only on such a step. Variants: `f16-tc` steps over one key tile
 * (16 keys) at a time, `f16-tc2` over two (half the barriers, twice the registers for V).
 *
 * The workgroup arrays are the members of one workgroup struct. Declared as separate
 * workgroup variables, they computed wrong values in every validate row on the H200 (driver
 * 580.159.04): results that the matrix store wrote to S were read back by the invocations
 * as if from a few rows and columns further on, though each matrix load and store alone
 * read correctly in small probe kernels. Padding, a single workgroup, reordering the
 * variables and a plain flag instead of an atomic one left the error as it was; one struct
 * fixed every row (branch `wip/prefill-attention-tc`, lab/NOTES.md, has the probes).
 *
 * Accuracy: q * scale and P are rounded to f16 (K and V are f16 already); sums are f32.
 * The reference rounds q * scale alike and keeps P exact, so the tolerance covers P's
 * rounding: about 2^-11 of each weight.
 *
 * Workgroup memory (workgroupBytes): q f16 [max(16, KW), 136] (Q, then a step's V staged
 * with zeros past the context), S f32 [16, KW], P f16 [16, KW + 8]: 6,152 bytes (`f16-tc`,
 * and `f16-tcs`, which stages q, then each step's K and V, in the q array) and 12,040
 * (`f16-tc2`). The staged forms of RT subgroups keep that q array at 16 rows (q goes through
 * it in RT passes) beside RT times the S and P: 7,944 bytes (`f16-tcs2`), 11,528 (`f16-tcs4`).
 * On the H200 about 48 KB of workgroup memory an SM bounds how many workgroups it holds.
 */
import { type KernelCase, splitForTwins, unwrittenSentinel } from "./case.ts";
import type { Gpu } from "../src/gpu/device.ts";
import { type KernelSpec, unsupportedReason, type Variant } from "./kernel.ts";
import { clampF16, roundToF16InPlace } from "../src/util/f16.ts";
import {
  attentionCase,
  type AttentionCaseForm,
  QWEN3_30B,
  spec as fmaSpec,
} from "./paged_attention.ts";

const params = fmaSpec.params;

/** The one head size of the variants (their loops over head_dim are unrolled). */
const HD = 128;

/** Query rows of a workgroup. */
const ROWS = 16;

function tcVariant(kt: 1 | 2): Variant {
  return {
    name: kt === 1 ? "f16-tc" : "f16-tc2",
    dtype: "f16",
    subgroupMatrix: { m: 16, n: 16, k: 16 },
    scalarReads: true,
    consts: { KT: kt, HD },
  };
}

/**
 * The form with K and V staged through workgroup memory as 16-byte words
 * (shaders/paged_attention_tcs.wgsl): f16-tc's computation, each 16-key step's K and V loaded a
 * step ahead as vec4<u32> words, stored over one another in the buffer q is staged in, and the
 * matrices loaded from workgroup memory instead of straight from the paged cache; the same
 * workgroup memory as f16-tc.
 */
function tcsVariant(rt: 1 | 2 | 4, o16 = false, q16 = false): Variant {
  return {
    name: (rt === 1 ? "f16-tcs" : `f16-tcs${rt}`) + (q16 ? Q16_SUFFIX : "") +
      (o16 ? O16_SUFFIX : ""),
    dtype: "f16",
    subgroupMatrix: { m: 16, n: 16, k: 16 },
    wideWords: true,
    // the matrix offsets come from the invocation's subgroup (Tint cannot see that one
    // subgroup's are uniform)
    perSubgroupMatrices: true,
    shader: "paged_attention_tcs.wgsl",
    consts: { KT: 1, HD, RT: rt, O16: o16 ? 1 : 0, Q16: q16 ? 1 : 0 },
  };
}

/**
 * The name suffix of the staged forms' twins that read q as f16 from `q16`, times the scale
 * already (Q16 = 1): qk_norm_rope_cache writes it so (its `q16` param), half the bytes of the
 * f32 q it would write and this kernel read, and the same f16 values this kernel stages from
 * that f32 q (q * scale rounded to f16, clamped). Only the default f16-tcs4 has them.
 */
export const Q16_SUFFIX = "-q16";

/** The f16-q twin of a form's name, or null for a form without one. */
export function q16TwinOf(name: string): string | null {
  const twin = name + Q16_SUFFIX;
  return spec.variants.some((v) => v.name === twin) ? twin : null;
}

/**
 * The name suffix of the staged forms' twins that write O as f16 into `out16` instead of f32
 * into `out` (O16 = 1): the f16 operand of a tensor-core o projection, so no cast_f16 dispatch
 * reads the f32 O back and writes it again (at 8 x 2048, 104 us a layer on the H200, session 49).
 */
export const O16_SUFFIX = "-o16";

/** The f16-output twin of a form's name, or null for a form without one. */
export function o16TwinOf(name: string): string | null {
  const twin = name + O16_SUFFIX;
  return spec.variants.some((v) => v.name === twin) ? twin : null;
}

/** Query rows of a variant's workgroup: ROWS a subgroup, RT subgroups (f16-tcs2, f16-tcs4). */
export function tileRows(v: Variant): number {
  return ROWS * (v.consts?.RT ?? 1);
}

/** Workgroup memory of a variant in bytes (see the module doc). */
export function workgroupBytes(v: Variant): number {
  const { KT, HD: hd } = v.consts!;
  const kw = 16 * KT;
  const rows = tileRows(v);
  // the staged forms' q buffer holds a step's 16 keys; q goes through it in RT passes
  const qRows = v.shader === "paged_attention_tcs.wgsl" ? ROWS : rows;
  return Math.max(qRows, kw) * (hd + 8) * 2 + rows * kw * 4 + rows * (kw + 8) * 2 + 8;
}

/**
 * Why paged_attention_tc cannot take this geometry, or null: head_dim must be the variants'
 * 128, block_size a multiple of 16 (a key tile inside one block), at most 16 query heads a
 * kv head.
 */
export function tcGeometryReason(
  p: { num_q_heads: number; num_kv_heads: number; head_dim: number; block_size: number },
): string | null {
  if (p.head_dim === HD && p.block_size % 16 !== 0) {
    return `block_size ${p.block_size} is not a multiple of 16`;
  }
  return tcHeadsReason(p);
}

/**
 * Why the heads do not fit a 16-row tensor-core attention matrix, or null: head_dim must be
 * 128, num_q_heads a multiple of num_kv_heads with at most 16 query heads a kv head (the
 * prefill and decode tensor-core kernels alike).
 */
export function tcHeadsReason(
  p: { num_q_heads: number; num_kv_heads: number; head_dim: number },
): string | null {
  if (p.head_dim !== HD) return `head_dim ${p.head_dim} (the tensor-core variants take ${HD})`;
  if (!(p.num_kv_heads >= 1) || p.num_q_heads % p.num_kv_heads !== 0) {
    return `num_q_heads ${p.num_q_heads} is not a multiple of num_kv_heads ${p.num_kv_heads}`;
  }
  if (p.num_q_heads / p.num_kv_heads > ROWS) {
    return `${p.num_q_heads / p.num_kv_heads} query heads per kv head, at most ${ROWS}`;
  }
  return null;
}

export const spec: KernelSpec<typeof params.fields> = {
  name: "paged_attention_tc",
  shader: "paged_attention_tc.wgsl",
  params,
  // paged_attention's bindings; the variants read K and V as scalars (scalarReads: matrix
  // loads take an array of f16)
  bindings: [
    ...fmaSpec.bindings,
    {
      name: "out16",
      type: "vec4<T>",
      access: "read_write",
      shape: "[tokens, num_q_heads * head_dim / 4] (the -o16 twins' O, f16; the others leave it)",
    },
    {
      name: "q16",
      type: "vec4<T>",
      access: "read",
      shape: "[tokens, num_q_heads * head_dim / 4] (q * scale in f16, read by the -q16 twins)",
    },
  ],
  variants: [
    tcVariant(1),
    tcVariant(2),
    tcsVariant(1),
    tcsVariant(2),
    tcsVariant(4),
    tcsVariant(1, true),
    tcsVariant(2, true),
    tcsVariant(4, true),
    tcsVariant(4, false, true),
    tcsVariant(4, true, true),
  ],
  grid: (p, v, gpu) => {
    const reason = tcGeometryReason(p);
    if (reason) throw new Error(`paged_attention_tc/${v.name}: ${reason}`);
    const group = p.num_q_heads / p.num_kv_heads;
    const bytes = workgroupBytes(v);
    const limit = gpu.limits.maxComputeWorkgroupStorageSize;
    if (limit !== undefined && bytes > limit) {
      throw new Error(
        `paged_attention_tc/${v.name}: ${bytes} bytes of workgroup memory, the device allows ${limit}`,
      );
    }
    return [
      Math.ceil(p.max_query_len / Math.floor(tileRows(v) / group)),
      p.num_seqs,
      p.num_kv_heads,
    ];
  },
};

/**
 * Why `variant` cannot run this geometry on this device, or null: the geometry, the
 * device's support (f16 subgroup matrices, subgroups of 32), the workgroup memory.
 */
export function tcRunReason(
  gpu: Gpu,
  variant: Variant,
  p: { num_q_heads: number; num_kv_heads: number; head_dim: number; block_size: number },
): string | null {
  const limit = gpu.limits.maxComputeWorkgroupStorageSize;
  return tcGeometryReason(p) ?? unsupportedReason(gpu, variant) ??
    (limit !== undefined && workgroupBytes(variant) > limit
      ? `${workgroupBytes(variant)} bytes of workgroup memory, the device allows ${limit}`
      : null);
}

const TC_FORM: AttentionCaseForm = { qF16: true, tolerance: { atol: 2e-3, rtol: 2e-3 } };

/**
 * A case as two: the forms that write O as f32 into `out` (out16 bound, holding a sentinel they
 * must leave), and their -o16 twins, which write it into `out16` as f16 (the reference clamped
 * to f16's range and rounded; `out` holding the sentinel, left as it is).
 */
function withF16Twins(
  c: KernelCase<typeof params.fields>,
): KernelCase<typeof params.fields>[] {
  const n = c.outputs.out;
  return splitForTwins(c, NAMES, (name) => name.endsWith(O16_SUFFIX), {
    inputs: (rng, v) => ({ ...c.inputs(rng, v), out16: unwrittenSentinel(n) }),
    outputs: { ...c.outputs, out16: n },
    reference: (inp, v) => ({ ...c.reference(inp, v), out16: unwrittenSentinel(n) }),
  }, {
    label: `${c.label}, O as f16`,
    inputs: (rng, v) => ({ ...c.inputs(rng, v), out: unwrittenSentinel(n) }),
    outputs: { out: n, out16: n },
    reference: (inp, v) => ({
      out: unwrittenSentinel(n),
      out16: roundToF16InPlace(clampF16(Float32Array.from(c.reference(inp, v).out))),
    }),
    bytes: (v) => c.bytes(v) - 2 * n,
  });
}

/** The cases of every form; withF16Twins splits each for the -o16 twins. */
const TC_CASES: KernelCase<typeof params.fields>[] = [
  attentionCase({
    label: "2 seqs q=17,3 prefixes 21,9, bs=16 q/kv=8/1",
    numQHeads: 8,
    numKvHeads: 1,
    headDim: HD,
    blockSize: 16,
    lens: [{ prefix: 21, query: 17 }, { prefix: 9, query: 3 }],
  }, TC_FORM),
  attentionCase({
    label: "4 seqs q=23,9,1,14 prefixes 45,0,130,7, bs=16 q/kv=16/2",
    numQHeads: 16,
    numKvHeads: 2,
    headDim: HD,
    blockSize: 16,
    lens: [
      { prefix: 45, query: 23 },
      { prefix: 0, query: 9 },
      { prefix: 130, query: 1 },
      { prefix: 7, query: 14 },
    ],
  }, TC_FORM),
  // G = 4 (Mixtral's 32 / 8) over 32-slot blocks, G = 16 (a tile of one token), G = 3 (16
  // rows hold 5 tokens and 1 padding row)
  attentionCase({
    label: "3 seqs q=40,1,5 prefixes 0,77,31, bs=32 q/kv=32/8",
    numQHeads: 32,
    numKvHeads: 8,
    headDim: HD,
    blockSize: 32,
    lens: [{ prefix: 0, query: 40 }, { prefix: 77, query: 1 }, { prefix: 31, query: 5 }],
  }, TC_FORM),
  attentionCase({
    label: "2 seqs q=3,2 prefixes 17,1, bs=16 q/kv=16/1",
    numQHeads: 16,
    numKvHeads: 1,
    headDim: HD,
    blockSize: 16,
    lens: [{ prefix: 17, query: 3 }, { prefix: 1, query: 2 }],
  }, TC_FORM),
  attentionCase({
    label: "1 seq q=45 prefix 19, bs=16 q/kv=6/2",
    numQHeads: 6,
    numKvHeads: 2,
    headDim: HD,
    blockSize: 16,
    lens: [{ prefix: 19, query: 45 }],
  }, TC_FORM),
  // keys of std 6: scores of std 6, so later keys pass the first ones' max by more than 8
  // and rows rescale O
  attentionCase({
    label: "1 seq q=300 prefix 700, bs=16 q/kv=8/2, wide scores (rescales)",
    numQHeads: 8,
    numKvHeads: 2,
    headDim: HD,
    blockSize: 16,
    lens: [{ prefix: 700, query: 300 }],
    kStd: 6,
  }, TC_FORM),
  attentionCase({
    label: "Qwen3-30B-A3B prefill 1 x 2048",
    ...QWEN3_30B,
    lens: [{ prefix: 0, query: 2048 }],
  }, TC_FORM),
  attentionCase({
    label: "Qwen3-30B-A3B chunk 512 after 1536 cached + 7 decodes at 1000",
    ...QWEN3_30B,
    lens: [{ prefix: 1536, query: 512 }, ...Array(7).fill({ prefix: 999, query: 1 })],
  }, TC_FORM),
];

/**
 * A case as two: the forms that read q (q16 bound, 16 bytes, unread), and the -q16 twins,
 * which read q16 = q * scale (rounded to f16 on upload, as the reference rounds it); their q
 * is twice the real one, so a twin that read it would fail.
 */
function withQ16Twins(
  c: KernelCase<typeof params.fields>,
): KernelCase<typeof params.fields>[] {
  const scale = c.params.scale;
  return splitForTwins(c, NAMES, (name) => name.includes(Q16_SUFFIX), {
    inputs: (rng, v) => ({ ...c.inputs(rng, v), q16: new Float32Array(8) }),
  }, {
    label: `${c.label}, q as f16`,
    inputs: (rng, v) => {
      const inp = c.inputs(rng, v);
      const q = inp.q as Float32Array;
      return { ...inp, q: q.map((x) => 2 * x), q16: q.map((x) => x * scale) };
    },
    reference: (inp, v) =>
      c.reference({ ...inp, q: (inp.q16 as Float32Array).map((x) => x / scale) }, v),
    // (q read as f16: O has q's size)
    bytes: (v) => c.bytes(v) - 2 * (c.outputs.out ?? c.outputs.out16),
  });
}

const NAMES = spec.variants.map((v) => v.name);

export const cases: KernelCase<typeof params.fields>[] = TC_CASES.flatMap(withF16Twins).flatMap(
  withQ16Twins,
);
