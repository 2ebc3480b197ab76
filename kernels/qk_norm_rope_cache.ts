/**
 * The step between the fused QKV projection and attention, in one dispatch: per-head
 * RMSNorm of q and k (Qwen3; `qk_norm: 0` skips it, as Mixtral has none), rotate-half RoPE
 * at each token's position, q written to q_out, k and v written into the paged KV cache of
 * the layer at slot_mapping[t] (slot = block * block_size + offset; slot < 0 = padding,
 * writes no K/V).
 *
 * ```ts
 * const p = { tokens, num_q_heads: 32, num_kv_heads: 4, head_dim: 128,
 *   max_positions: table.length / 128, qk_norm: 1, eps: 1e-6, splits: 1, split_stride: 0 };
 * // bindings: qkv, q_norm, k_norm, cos_sin (ropeTable), positions, slot_mapping, q_out,
 * //           k_cache, v_cache
 * pass.dispatchWorkgroups(...spec.grid(p, variant, gpu));
 * ```
 *
 * Two shader forms, the same bindings, params and results:
 * - "f32", "f16" (shaders/qk_norm_rope_cache_heads.wgsl, the model's): several (token, head)
 *   pairs a workgroup of 256, a head on `headLanes` invocations (32 at head_dim 128: 8 heads a
 *   workgroup, 4 values an invocation, held in registers, qkv read once), the head's sum of
 *   squares a segmented tree in workgroup memory (2 barriers at head_dim 128). Why: the
 *   one-pair form moved ~1.3 TB/s of the H200's ~4 TB/s at 16384 tokens x 40 heads
 *   (Qwen3-30B-A3B prefill, ~0.42 ms a layer), with a 64-wide tree of 7 barriers for 2 values
 *   an invocation and qkv read twice (sum, then rotation). head_dim up to 2 * WG * PAIRS
 *   (1024); the grid throws for more.
 * - "f32-wg64", "f16-wg64" (shaders/qk_norm_rope_cache.wgsl): one workgroup of 64 per
 *   (token, head) pair, any even head_dim; kept as the reference form and for comparison.
 *
 * With `q16`, q goes to q16 in the storage type instead, times q16_scale (the attention's
 * scale, folded in where the staged prefill attention would apply it before rounding q to
 * f16: the same f16 values, half the bytes written and read again).
 *
 * Bytes: qkv read once (tokens * (nq + 2 nkv) * head_dim * 4), q_out written once
 * (tokens * nq * head_dim * 4; q16: sizeof(T)), K and V of tokens with a slot written once
 * (tokens * 2 * nkv * head_dim * sizeof(T)), one cos/sin row per token (head_dim * 4),
 * positions and slots (8 per token), the norm weights (2 * head_dim * sizeof(T)).
 */
import { type HostArray, type KernelCase, unwrittenSentinel } from "./case.ts";
import { grid1d, type KernelSpec, type Variant } from "./kernel.ts";
import { defineParams } from "./params.ts";
import { ropeTable } from "./rope.ts";

const params = defineParams({
  tokens: "u32",
  num_q_heads: "u32",
  num_kv_heads: "u32",
  head_dim: "u32",
  /** Rows of cos_sin; a position beyond it is clamped (the host must never ask for one). */
  max_positions: "u32",
  /** 1: RMSNorm q and k per head with q_norm / k_norm (Qwen3); 0: none (Mixtral). */
  qk_norm: "u32",
  eps: "f32",
  /**
   * 1: qkv holds the projection; more: its split-K partial sums, split_stride values apart
   * (tokens * width), added up here in splitk_reduce's order instead of by a reduce dispatch.
   */
  splits: "u32",
  split_stride: "u32",
  /**
   * 1: q goes to q16 as T, times q16_scale and clamped to T's range (the staged prefill
   * attention's -q16 twins read it so: paged_attention_tc.ts), and q_out is left alone; 0: q
   * to q_out as f32.
   */
  q16: "u32",
  q16_scale: "f32",
});

/** Params of qk_norm_rope_cache. */
export type QkNormRopeCacheParams = { readonly [K in keyof typeof params.fields]: number };

/** The several-heads-a-workgroup form (the default variants "f32" and "f16"). */
const HEADS_SHADER = "qk_norm_rope_cache_heads.wgsl";

/**
 * Its constants: WG invocations, PAIRS rotation pairs (2 PAIRS values) of a head an invocation
 * at most, RADIX partial sums added a step of the segmented tree.
 */
const HEADS_CONSTS = { WG: 256, PAIRS: 2, RADIX: 8 } as const;

export const spec: KernelSpec<typeof params.fields> = {
  name: "qk_norm_rope_cache",
  shader: "qk_norm_rope_cache.wgsl",
  params,
  bindings: [
    {
      name: "qkv",
      type: "f32",
      access: "read",
      shape: "[splits, tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]",
    },
    {
      name: "q_norm",
      type: "T",
      access: "read",
      shape: "[head_dim] (any buffer when qk_norm = 0)",
    },
    {
      name: "k_norm",
      type: "T",
      access: "read",
      shape: "[head_dim] (any buffer when qk_norm = 0)",
    },
    {
      name: "cos_sin",
      type: "f32",
      access: "read",
      shape: "[max_positions, head_dim] (ropeTable)",
    },
    { name: "positions", type: "i32", access: "read", shape: "[tokens]" },
    { name: "slot_mapping", type: "i32", access: "read", shape: "[tokens] (-1: padding)" },
    { name: "q_out", type: "f32", access: "read_write", shape: "[tokens, num_q_heads, head_dim]" },
    {
      name: "k_cache",
      type: "T",
      access: "read_write",
      shape: "[num_blocks, block_size, num_kv_heads, head_dim]",
    },
    {
      name: "v_cache",
      type: "T",
      access: "read_write",
      shape: "[num_blocks, block_size, num_kv_heads, head_dim]",
    },
    {
      name: "q16",
      type: "T",
      access: "read_write",
      shape: "[tokens, num_q_heads, head_dim] (q * q16_scale where q16; any buffer else)",
    },
  ],
  variants: [
    { name: "f32", dtype: "f32", shader: HEADS_SHADER, consts: HEADS_CONSTS },
    { name: "f16", dtype: "f16", shader: HEADS_SHADER, consts: HEADS_CONSTS },
    { name: "f32-wg64", dtype: "f32", shader: "qk_norm_rope_cache.wgsl", consts: { WG: 64 } },
    { name: "f16-wg64", dtype: "f16", shader: "qk_norm_rope_cache.wgsl", consts: { WG: 64 } },
    // lab forms: 4 and 8 rotation pairs an invocation (16 and 8 lanes a head at head_dim 128,
    // 16 and 32 heads a workgroup), more of a workgroup's reads in flight before its barriers;
    // validate times them beside "f16" (the model runs "f16")
    { name: "f16-p4", dtype: "f16", shader: HEADS_SHADER, consts: { ...HEADS_CONSTS, PAIRS: 4 } },
    { name: "f16-p8", dtype: "f16", shader: HEADS_SHADER, consts: { ...HEADS_CONSTS, PAIRS: 8 } },
  ],
  grid: (p, v, gpu) => {
    if (p.head_dim % 2 !== 0 || p.head_dim < 2) {
      throw new Error(`qk_norm_rope_cache: head_dim ${p.head_dim} must be even`);
    }
    if (p.max_positions < 1) throw new Error("qk_norm_rope_cache: max_positions 0");
    if (p.splits < 1) throw new Error("qk_norm_rope_cache: splits 0 (1: no split-K partials)");
    const width = (p.num_q_heads + 2 * p.num_kv_heads) * p.head_dim;
    if (p.splits > 1 && p.split_stride < p.tokens * width) {
      throw new Error(
        `qk_norm_rope_cache: split_stride ${p.split_stride} < tokens * width ${p.tokens * width}`,
      );
    }
    const pairs = p.tokens * (p.num_q_heads + 2 * p.num_kv_heads);
    // the one-pair form (no PAIRS; keyed on the consts, as a test's copy of a form renames its shader)
    if (v.consts?.PAIRS === undefined) return grid1d(pairs, gpu);
    return grid1d(Math.ceil(pairs / headsPerWorkgroup(p.head_dim, v)), gpu);
  },
};

/**
 * Invocations a head in the several-heads form (the shader's head_lanes): the least power of
 * two that holds head_dim / 2 rotation pairs at PAIRS an invocation (32 at head_dim 128).
 * Throws for a head_dim that needs more than a workgroup.
 */
export function headLanes(headDim: number, variant: Variant): number {
  const wg = variant.consts!.WG, pairs = variant.consts!.PAIRS;
  const need = Math.max(1, Math.ceil(headDim / 2 / pairs));
  if (need > wg) {
    throw new Error(
      `qk_norm_rope_cache/${variant.name}: head_dim ${headDim} > ${2 * wg * pairs} ` +
        `(the largest a workgroup of ${wg} holds; the -wg64 forms take any even head_dim)`,
    );
  }
  return 2 ** Math.ceil(Math.log2(need));
}

/** (token, head) pairs a workgroup of the several-heads form (8 at head_dim 128). */
export function headsPerWorkgroup(headDim: number, variant: Variant): number {
  return variant.consts!.WG / headLanes(headDim, variant);
}

/** Head geometry of the fused projection. */
export interface QkvShape {
  readonly numQHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
}

/**
 * CPU reference (f64 inside, f32 results). Returns q [tokens, nq, head_dim] and copies of
 * the caches with every token's K/V written at its slot (none for slot < 0); the RoPE
 * angles are read from `cosSin` (ropeTable), as the GPU does.
 */
export function qkNormRopeCacheRef(
  qkv: Float32Array,
  qNorm: Float32Array | null,
  kNorm: Float32Array | null,
  cosSin: Float32Array,
  positions: Int32Array,
  slotMapping: Int32Array,
  kCache: Float32Array,
  vCache: Float32Array,
  shape: QkvShape,
  eps: number,
): { q: Float32Array; kCache: Float32Array; vCache: Float32Array } {
  const { numQHeads: nq, numKvHeads: nkv, headDim: hd } = shape;
  const heads = nq + 2 * nkv, half = hd / 2;
  const tokens = positions.length;
  const q = new Float32Array(tokens * nq * hd);
  const k = new Float32Array(kCache), v = new Float32Array(vCache);
  const x = new Float64Array(hd);
  for (let t = 0; t < tokens; t++) {
    const slot = slotMapping[t];
    const table = positions[t] * hd;
    for (let h = 0; h < heads; h++) {
      const src = (t * heads + h) * hd;
      if (h >= nq + nkv) {
        if (slot >= 0) v.set(qkv.subarray(src, src + hd), (slot * nkv + h - nq - nkv) * hd);
        continue;
      }
      const weight = h < nq ? qNorm : kNorm;
      let inv = 1;
      if (weight) {
        let ss = 0;
        for (let i = 0; i < hd; i++) ss += qkv[src + i] ** 2;
        inv = 1 / Math.sqrt(ss / hd + eps);
      }
      for (let i = 0; i < hd; i++) x[i] = qkv[src + i] * inv * (weight ? weight[i] : 1);
      const dst = h < nq ? q : k;
      const at = h < nq ? (t * nq + h) * hd : (slot * nkv + h - nq) * hd;
      if (h >= nq && slot < 0) continue;
      for (let i = 0; i < half; i++) {
        const c = cosSin[table + i], s = cosSin[table + half + i];
        dst[at + i] = x[i] * c - x[i + half] * s;
        dst[at + i + half] = x[i + half] * c + x[i] * s;
      }
    }
  }
  return { q, kCache: k, vCache: v };
}

interface CaseShape extends QkvShape {
  readonly label: string;
  readonly tokens: number;
  readonly blockSize: number;
  readonly numBlocks: number;
  readonly maxPositions: number;
  readonly qkNorm: boolean;
  /** Token indices that are padding (slot -1). */
  readonly padding?: readonly number[];
  /** Split-K partial sums the kernel adds up (default 1: the projection itself). */
  readonly splits?: number;
  /**
   * The projection's spread (default 2); about sqrt(eps) makes the norm's eps count, past
   * f16's range (no norm) the f16 cache's clamp.
   */
  readonly qkvStd?: number;
  /** q into q16 in the storage type times this (the params' q16), q_out left alone. */
  readonly q16Scale?: number;
}

/** f16's largest finite value: what an f16 cache stores for a value past it (T_MAX). */
const F16_MAX = 65504;

function qkCase(c: CaseShape): KernelCase<typeof params.fields> {
  const { tokens, numQHeads: nq, numKvHeads: nkv, headDim: hd } = c;
  const cacheElems = c.numBlocks * c.blockSize * nkv * hd;
  const slots = c.numBlocks * c.blockSize;
  if (slots < tokens) throw new Error(`${c.label}: ${slots} slots < ${tokens} tokens`);
  const written = tokens - (c.padding?.length ?? 0);
  const eps = 1e-6;
  const splits = c.splits ?? 1;
  const width = (nq + 2 * nkv) * hd;
  const scale = c.qkNorm ? 1 : Math.max(1, (c.qkvStd ?? 2) / 2);
  const q16 = c.q16Scale !== undefined;
  const qValues = tokens * nq * hd;
  return {
    label: c.label + (q16 ? `, q as T x ${+c.q16Scale!.toPrecision(4)}` : ""),
    params: {
      tokens,
      num_q_heads: nq,
      num_kv_heads: nkv,
      head_dim: hd,
      max_positions: c.maxPositions,
      qk_norm: c.qkNorm ? 1 : 0,
      eps,
      splits,
      split_stride: splits > 1 ? tokens * width : 0,
      q16: c.q16Scale === undefined ? 0 : 1,
      q16_scale: c.q16Scale ?? 1,
    },
    inputs: (rng) => {
      const slotMapping = Int32Array.from(rng.shuffle([...Array(slots).keys()]).slice(0, tokens));
      for (const t of c.padding ?? []) slotMapping[t] = -1;
      return {
        qkv: rng.fillNormal(
          new Float32Array(splits * tokens * width),
          (c.qkvStd ?? 2) / Math.sqrt(splits),
        ),
        q_norm: rng.fillUniform(new Float32Array(hd), 0.5, 1.5),
        k_norm: rng.fillUniform(new Float32Array(hd), 0.5, 1.5),
        cos_sin: ropeTable(c.maxPositions, hd, 1e6),
        positions: new Int32Array(tokens).map(() => rng.int(0, c.maxPositions)),
        slot_mapping: slotMapping,
        k_cache: rng.fillNormal(new Float32Array(cacheElems)),
        v_cache: rng.fillNormal(new Float32Array(cacheElems)),
        // with q16, q_out holds a sentinel the kernel must leave (without, q16 is unwritten)
        ...(q16 ? { q_out: unwrittenSentinel(qValues) } : { q16: new Float32Array(4) }),
      };
    },
    outputs: q16 ? { q_out: qValues, q16: qValues } : { q_out: qValues },
    reference: (inp, v) => {
      // the partials added in the kernel's (splitk_reduce's) order, in f32
      const part = inp.qkv as Float32Array;
      const qkv = new Float32Array(part.subarray(0, tokens * width));
      for (let s = 1; s < splits; s++) {
        for (let i = 0; i < qkv.length; i++) qkv[i] += part[s * tokens * width + i];
      }
      const r = qkNormRopeCacheRef(
        qkv,
        c.qkNorm ? inp.q_norm as Float32Array : null,
        c.qkNorm ? inp.k_norm as Float32Array : null,
        inp.cos_sin as Float32Array,
        inp.positions as Int32Array,
        inp.slot_mapping as Int32Array,
        inp.k_cache as Float32Array,
        inp.v_cache as Float32Array,
        c,
        eps,
      );
      if (v.dtype === "f16") {
        // an f16 cache holds a value past f16's range as the largest finite one
        for (const cache of [r.kCache, r.vCache]) {
          for (let i = 0; i < cache.length; i++) {
            cache[i] = Math.min(F16_MAX, Math.max(-F16_MAX, cache[i]));
          }
        }
      }
      const want: Record<string, HostArray> = { k_cache: r.kCache, v_cache: r.vCache };
      if (!q16) return { ...want, q_out: r.q };
      // (T's range: an f16 q16 holds a value past f16's as the largest finite one)
      const limit = v.dtype === "f16" ? F16_MAX : Infinity;
      const scaled = r.q.map((x) => Math.min(limit, Math.max(-limit, x * c.q16Scale!)));
      return { ...want, q_out: unwrittenSentinel(qValues), q16: scaled };
    },
    // without the norm, RoPE's f32 rounding grows with the values: atol in proportion
    tolerance: (v) =>
      v.dtype === "f16" ? { atol: 1e-4 * scale, rtol: 1e-3 } : { atol: 1e-5 * scale, rtol: 1e-4 },
    // q_out is f32 in every form, computed in f32 from the (rounded) inputs: the f32 bound
    bindingTolerances: () => ({ q_out: { atol: 1e-5 * scale, rtol: 1e-4 } }),
    bytes: (v) => {
      const t = v.dtype === "f16" ? 2 : 4;
      return splits * tokens * width * 4 + tokens * nq * hd * (q16 ? t : 4) +
        written * 2 * nkv * hd * t + tokens * (hd * 4 + 8) + 2 * hd * t;
    },
    flops: tokens * (nq + nkv) * hd * 8,
  };
}

/** A small Mixtral-form shape (no q/k norm), alone and with split-K partials. */
const MIXTRAL_FORM: CaseShape = {
  label: "7 tokens q/kv=6/2 hd=32 bs=4, no norm (Mixtral form)",
  tokens: 7,
  numQHeads: 6,
  numKvHeads: 2,
  headDim: 32,
  blockSize: 4,
  numBlocks: 5,
  maxPositions: 300,
  qkNorm: false,
};

/** A GQA group of 8 at Qwen3's head size, with a padding token. */
const GQA_8: CaseShape = {
  label: "3 tokens (last padding) q/kv=8/1 hd=128 bs=16, qk norm",
  tokens: 3,
  numQHeads: 8,
  numKvHeads: 1,
  headDim: 128,
  blockSize: 16,
  numBlocks: 2,
  maxPositions: 8192,
  qkNorm: true,
  padding: [2],
};

/** A Qwen3-30B-A3B prefill step of 16384 tokens (8 x 2048, 64 x 512 in two). */
const QWEN3_PREFILL_16K: CaseShape = {
  label: "Qwen3-30B-A3B prefill 16384 tokens",
  tokens: 16384,
  numQHeads: 32,
  numKvHeads: 4,
  headDim: 128,
  blockSize: 16,
  numBlocks: 1024,
  maxPositions: 16384,
  qkNorm: true,
};

export const cases: KernelCase<typeof params.fields>[] = [
  qkCase({
    label: "5 tokens (1 padding) q/kv=2/1 hd=16 bs=4, qk norm",
    tokens: 5,
    numQHeads: 2,
    numKvHeads: 1,
    headDim: 16,
    blockSize: 4,
    numBlocks: 3,
    maxPositions: 64,
    qkNorm: true,
    padding: [3],
  }),
  qkCase({
    label: "4 tokens q/kv=2/1 hd=16 bs=4, qk norm, rms ~ 1e-3 (eps counts)",
    tokens: 4,
    numQHeads: 2,
    numKvHeads: 1,
    headDim: 16,
    blockSize: 4,
    numBlocks: 2,
    maxPositions: 64,
    qkNorm: true,
    qkvStd: 1e-3,
  }),
  qkCase(MIXTRAL_FORM),
  qkCase(GQA_8),
  qkCase({
    label: "Qwen3-30B-A3B decode 64 tokens",
    tokens: 64,
    numQHeads: 32,
    numKvHeads: 4,
    headDim: 128,
    blockSize: 16,
    numBlocks: 4096,
    maxPositions: 8192,
    qkNorm: true,
  }),
  qkCase({
    label: "Qwen3-30B-A3B decode 8 tokens (1 padding), 4 split-K partials",
    tokens: 8,
    numQHeads: 32,
    numKvHeads: 4,
    headDim: 128,
    blockSize: 16,
    numBlocks: 64,
    maxPositions: 8192,
    qkNorm: true,
    padding: [5],
    splits: 4,
  }),
  qkCase({
    ...MIXTRAL_FORM,
    label: "7 tokens q/kv=6/2 hd=32 bs=4, no norm, 3 split-K partials",
    splits: 3,
  }),
  qkCase({
    label: "Qwen3-30B-A3B prefill 2048 tokens",
    tokens: 2048,
    numQHeads: 32,
    numKvHeads: 4,
    headDim: 128,
    blockSize: 16,
    numBlocks: 256,
    maxPositions: 4096,
    qkNorm: true,
  }),
  qkCase(QWEN3_PREFILL_16K),
  // q as T times the attention's scale (the staged prefill attention's -q16 twins read it)
  qkCase({ ...GQA_8, q16Scale: 1 / Math.sqrt(128) }),
  qkCase({
    ...MIXTRAL_FORM,
    label: "7 tokens q/kv=6/2 hd=32 bs=4, no norm, q past f16's range (clamped)",
    q16Scale: 0.25,
    qkvStd: 4e5,
  }),
  qkCase({ ...QWEN3_PREFILL_16K, q16Scale: 1 / Math.sqrt(128) }),
  // the several-heads form's edges (head lanes: shaders/qk_norm_rope_cache_heads.wgsl)
  qkCase({
    label: "13 tokens (2 padding) q/kv=3/1 hd=96 bs=8, qk norm, 2 split-K partials " +
      "(32 lanes a head, half the second pair)",
    tokens: 13,
    numQHeads: 3,
    numKvHeads: 1,
    headDim: 96,
    blockSize: 8,
    numBlocks: 2,
    maxPositions: 512,
    qkNorm: true,
    padding: [0, 7],
    splits: 2,
  }),
  qkCase({
    label: "3 tokens q/kv=3/1 hd=256 bs=4, qk norm (64 lanes a head, 4 heads a workgroup)",
    tokens: 3,
    numQHeads: 3,
    numKvHeads: 1,
    headDim: 256,
    blockSize: 4,
    numBlocks: 1,
    maxPositions: 64,
    qkNorm: true,
  }),
  qkCase({
    label: "2 tokens (1 padding) q/kv=2/1 hd=1024 bs=2, qk norm (one head a workgroup)",
    tokens: 2,
    numQHeads: 2,
    numKvHeads: 1,
    headDim: 1024,
    blockSize: 2,
    numBlocks: 2,
    maxPositions: 16,
    qkNorm: true,
    padding: [1],
  }),
  qkCase({
    label: "9 tokens (2 padding) q/kv=2/1 hd=6 bs=4, qk norm (2 lanes a head)",
    tokens: 9,
    numQHeads: 2,
    numKvHeads: 1,
    headDim: 6,
    blockSize: 4,
    numBlocks: 3,
    maxPositions: 32,
    qkNorm: true,
    padding: [0, 4],
  }),
  qkCase({
    label: "11 tokens q/kv=1/1 hd=2 bs=4, no norm (1 lane a head)",
    tokens: 11,
    numQHeads: 1,
    numKvHeads: 1,
    headDim: 2,
    blockSize: 4,
    numBlocks: 3,
    maxPositions: 32,
    qkNorm: false,
  }),
  qkCase({
    label: "7 tokens (1 padding) q/kv=4/2 hd=64 bs=4, no norm, qkv ~ 3e4 (the f16 cache clamps)",
    tokens: 7,
    numQHeads: 4,
    numKvHeads: 2,
    headDim: 64,
    blockSize: 4,
    numBlocks: 2,
    maxPositions: 256,
    qkNorm: false,
    padding: [3],
    qkvStd: 3e4,
  }),
  qkCase({
    label: "Mixtral-8x7B decode 64 tokens",
    tokens: 64,
    numQHeads: 32,
    numKvHeads: 8,
    headDim: 128,
    blockSize: 16,
    numBlocks: 1024,
    maxPositions: 8192,
    qkNorm: false,
  }),
];
