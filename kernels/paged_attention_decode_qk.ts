/**
 * Split-K paged decode attention with qk_norm_rope_cache's work for the step's query tokens
 * inside it, one dispatch a layer fewer in decode steps: every workgroup norms (q_norm) and
 * rotates (RoPE at position context_len - 1) its group's query heads from the fused projection
 * row `qkv` itself, and the workgroup whose split holds a sequence's new key norms and rotates
 * its kv head's K and writes K and V into the cache there before its loads (shaders/
 * lib/decode_q_qkv.wgsl). Otherwise it is paged_attention_decode: the same grid, split plan
 * (planDecodeSplits), outputs (`out`, or part_o / part_lse for the merge) and forms: the tiled
 * ones (`f32-tiled`, `f16-tiled`: lib/decode_tiled_main.wgsl) and the several-subgroup tensor-core
 * ones (`f16-tcdw2`, `f16-tcdw2h`: lib/decode_tcdw2_main.wgsl, which write the cache as the
 * 16-byte words they read). On the H200 (session 34) decode steps took 0.3-4.3% less GPU time with
 * it (64 x 8192 39.62-39.68 -> 37.95-37.98 ms, 1 x 1024 4.34-4.37 -> 4.22-4.24), except 8 x 1024
 * (11.50-11.55 -> 11.58).
 *
 * ```ts
 * const plan = planDecodeSplits(contextLens, shape, variantByName(decode.spec, "f16-tiled"));
 * const p = { ...decodeParams, split_tokens: plan.splitTokens, num_splits: plan.numSplits,
 *   qk_norm: 1, eps: 1e-6, max_positions, qkv_splits: 1, qkv_split_stride: 0 };
 * // bindings: qkv, q_norm, k_norm, cos_sin, k_cache, v_cache, block_tables, seq_info, out,
 * //           part_o, part_lse
 * pass.dispatchWorkgroups(...spec.grid(p, variant, gpu));
 * ```
 *
 * Bytes: paged_attention_decode's (every context key's K and V once), the query rows of qkv
 * (each split's workgroups read their group's q, K and V columns from cache), the new keys'
 * K and V written once.
 */
import type { HostArray, KernelCase } from "./case.ts";
import type { KernelSpec, Variant } from "./kernel.ts";
import { defineParams } from "./params.ts";
import * as decode from "./paged_attention_decode.ts";
import { QWEN3_30B, unpackSeqs } from "./paged_attention.ts";
import { qkNormRopeCacheRef } from "./qk_norm_rope_cache.ts";
import { ropeTable } from "./rope.ts";
import { roundToF16InPlace } from "../src/util/f16.ts";

const params = defineParams({
  ...decode.spec.params.fields,
  /** 1: RMSNorm q and k per head with q_norm / k_norm (Qwen3); 0: none (Mixtral). */
  qk_norm: "u32",
  eps: "f32",
  /** Rows of cos_sin; a position beyond it is clamped (the host must never ask for one). */
  max_positions: "u32",
  /** 1: qkv holds the projection; more: its split-K partial sums, added up here. */
  qkv_splits: "u32",
  /** vec4s between two partial sums of qkv (tokens * width / 4), 0 with one. */
  qkv_split_stride: "u32",
});

/** Params of paged_attention_decode_qk. */
export type PagedAttentionDecodeQkParams = {
  readonly [K in keyof typeof params.fields]: number;
};

const CACHE_SHAPE = "[num_blocks, block_size, num_kv_heads, head_dim / 4]";

/**
 * The forms with this twin (same name in paged_attention_decode) and the shader of each: the
 * tiled forms' and the several-subgroup tensor-core forms' (which declare the caches read_write
 * as 16-byte words already, Variant.readWrite, and write the words they read).
 */
const TWINS: Readonly<Record<string, string>> = {
  "f32-tiled": "paged_attention_decode_tiled_qk.wgsl",
  "f16-tiled": "paged_attention_decode_tiled_qk.wgsl",
  "f16-tcdw2": "paged_attention_decode_tcdw2_qk.wgsl",
  "f16-tcdw2h": "paged_attention_decode_tcdw2_qk.wgsl",
};

export const spec: KernelSpec<typeof params.fields> = {
  name: "paged_attention_decode_qk",
  shader: "paged_attention_decode_tiled_qk.wgsl",
  params,
  bindings: [
    {
      name: "qkv",
      type: "vec4<f32>",
      access: "read",
      shape: "[qkv_splits, tokens, (num_q_heads + 2 * num_kv_heads) * head_dim / 4]",
    },
    { name: "q_norm", type: "vec4<T>", access: "read", shape: "[head_dim / 4]" },
    { name: "k_norm", type: "vec4<T>", access: "read", shape: "[head_dim / 4]" },
    { name: "cos_sin", type: "vec4<f32>", access: "read", shape: "[max_positions, head_dim / 4]" },
    { name: "k_cache", type: "vec4<T>", access: "read_write", shape: CACHE_SHAPE },
    { name: "v_cache", type: "vec4<T>", access: "read_write", shape: CACHE_SHAPE },
    ...decode.spec.bindings.filter((b) => !["q", "k_cache", "v_cache"].includes(b.name)),
  ],
  variants: decode.spec.variants.filter((v) => TWINS[v.name] !== undefined).map((v) => ({
    ...v,
    shader: TWINS[v.name],
  })),
  grid: (p, v, gpu) => {
    if (p.head_dim % 8 !== 0) {
      throw new Error(
        `paged_attention_decode_qk: head_dim ${p.head_dim} is not a multiple of 8`,
      );
    }
    if (p.max_positions < 1) throw new Error("paged_attention_decode_qk: max_positions 0");
    if (p.qkv_splits < 1) {
      throw new Error("paged_attention_decode_qk: qkv_splits 0 (1: no split-K partials)");
    }
    return decode.spec.grid(p, v, gpu);
  },
};

/** The paged_attention_decode form whose twin this kernel has, or null. */
export function qkTwinOf(decodeVariant: string): Variant | null {
  return spec.variants.find((v) => v.name === decodeVariant) ?? null;
}

/** Of paged_attention_decode's forms (undefined: all), those with a twin (undefined: all). */
function twinsOf(names: readonly string[] | undefined): string[] | undefined {
  return names?.filter((n) => TWINS[n] !== undefined);
}

interface CaseShape extends decode.DecodeCaseShape {
  readonly qkNorm: boolean;
  /** Split-K partial sums of qkv the kernel adds up (default 1). */
  readonly qkvSplits?: number;
}

/**
 * paged_attention_decode's case of these sequences with the query made here: its q replaced by
 * the projection rows (and the norms and RoPE table), its reference fed the q and caches that
 * qk_norm_rope_cache's reference makes of them, the caches compared too.
 */
function qkCase(c: CaseShape): KernelCase<typeof params.fields> {
  const base = decode.decodeCase(c);
  const { numQHeads: nq, numKvHeads: nkv, headDim: hd, blockSize } = c;
  const eps = 1e-6;
  const maxPositions = Math.max(...c.contexts) + 5;
  const tokens = c.contexts.length;
  const width = (nq + 2 * nkv) * hd;
  const splits = c.qkvSplits ?? 1;
  return {
    ...base,
    params: {
      ...base.params,
      qk_norm: c.qkNorm ? 1 : 0,
      eps,
      max_positions: maxPositions,
      qkv_splits: splits,
      qkv_split_stride: splits > 1 ? (tokens * width) / 4 : 0,
    },
    inputs: (rng, v) => {
      const { q: _q, ...rest } = base.inputs(rng, v);
      return {
        ...rest,
        qkv: rng.fillNormal(new Float32Array(splits * tokens * width), 2 / Math.sqrt(splits)),
        q_norm: rng.fillUniform(new Float32Array(hd), 0.5, 1.5),
        k_norm: rng.fillUniform(new Float32Array(hd), 0.5, 1.5),
        cos_sin: ropeTable(maxPositions, hd, 1e6),
      };
    },
    reference: (inp, v): Record<string, HostArray> => {
      const seqs = unpackSeqs(
        inp.seq_info as Int32Array,
        inp.block_tables as Int32Array,
        base.params.max_blocks,
      );
      // the partials added in the kernel's order, in f32
      const all = inp.qkv as Float32Array;
      const qkv = new Float32Array(all.subarray(0, tokens * width));
      for (let s = 1; s < splits; s++) {
        for (let i = 0; i < qkv.length; i++) qkv[i] += all[s * tokens * width + i];
      }
      const slots = Int32Array.from(seqs, (s) => {
        const pos = s.contextLen - 1;
        return s.blockTable[Math.floor(pos / blockSize)] * blockSize + pos % blockSize;
      });
      const r = qkNormRopeCacheRef(
        qkv,
        c.qkNorm ? inp.q_norm as Float32Array : null,
        c.qkNorm ? inp.k_norm as Float32Array : null,
        inp.cos_sin as Float32Array,
        Int32Array.from(seqs, (s) => s.contextLen - 1),
        slots,
        inp.k_cache as Float32Array,
        inp.v_cache as Float32Array,
        c,
        eps,
      );
      // the kernel stores the new K and V as T, and attends what it stored
      if (v.dtype === "f16") {
        roundToF16InPlace(r.kCache);
        roundToF16InPlace(r.vCache);
      }
      const caches = { k_cache: r.kCache, v_cache: r.vCache };
      return { ...base.reference({ ...inp, q: r.q, ...caches }, v), ...caches };
    },
    // (f16: the new key's K is rounded from norms summed in another order than the reference's)
    tolerance: (v) =>
      v.subgroupMatrix
        ? base.tolerance(v)
        : v.dtype === "f16"
        ? { atol: 2e-3, rtol: 2e-3 }
        : base.tolerance(v),
    variants: twinsOf(base.variants),
    bytes: (v) =>
      base.bytes(v) - tokens * nq * hd * 4 + splits * tokens * width * 4 +
      tokens * 2 * nkv * hd * (v.dtype === "f16" ? 2 : 4),
    flops: base.flops + tokens * (nq + nkv) * hd * 8,
  };
}

export const cases: KernelCase<typeof params.fields>[] = [
  qkCase({
    label: "1 seq ctx 7, bs=4 hd=16 q/kv=2/1",
    numQHeads: 2,
    numKvHeads: 1,
    headDim: 16,
    blockSize: 4,
    contexts: [7],
    qkNorm: true,
  }),
  qkCase({
    label: "3 seqs ctx 1,9,23, bs=4 hd=32 q/kv=6/2, splits of 5, no norm (Mixtral form)",
    numQHeads: 6,
    numKvHeads: 2,
    headDim: 32,
    blockSize: 4,
    contexts: [1, 9, 23],
    splitTokens: 5,
    qkNorm: false,
  }),
  qkCase({
    label: "2 seqs ctx 37,150, bs=16 hd=128 q/kv=8/1, qkv in 3 partial sums",
    numQHeads: 8,
    numKvHeads: 1,
    headDim: 128,
    blockSize: 16,
    contexts: [37, 150],
    splitTokens: 48,
    qkNorm: true,
    qkvSplits: 3,
  }),
  qkCase({ label: "Qwen3-30B-A3B decode 1 x 1024", ...QWEN3_30B, contexts: [1024], qkNorm: true }),
  // the tensor-core twins' shapes: splits of 16-key multiples, partial last steps, an empty
  // split, the new key first in its block and last in it
  qkCase({
    label: "Qwen3-30B-A3B decode ctx 17,96,300, splits of 96",
    ...QWEN3_30B,
    contexts: [17, 96, 300],
    splitTokens: 96,
    qkNorm: true,
  }),
  qkCase({
    label: "16 heads a kv head, ctx 2000,33, splits of 1024, qkv in 2 partial sums",
    numQHeads: 32,
    numKvHeads: 2,
    headDim: 128,
    blockSize: 16,
    contexts: [2000, 33],
    splitTokens: 1024,
    qkNorm: true,
    qkvSplits: 2,
  }),
  qkCase({
    label: "Mixtral-8x7B decode ctx 700,64, splits of 352, no norm",
    numQHeads: 32,
    numKvHeads: 8,
    headDim: 128,
    blockSize: 16,
    contexts: [700, 64],
    splitTokens: 352,
    qkNorm: false,
  }),
  qkCase({
    label: "Qwen3-30B-A3B decode 8 x 8192 (the model's deep plan)",
    ...QWEN3_30B,
    contexts: Array(8).fill(8192),
    qkNorm: true,
  }),
  qkCase({
    label: "Qwen3-30B-A3B decode ctx 1,17,100,333,1000, bs=32, splits of 100",
    ...QWEN3_30B,
    blockSize: 32,
    contexts: [1, 17, 100, 333, 1000],
    splitTokens: 100,
    qkNorm: true,
  }),
  qkCase({
    label: "Qwen3-30B-A3B decode ctx 77,300 one split, qkv in 2 partial sums",
    ...QWEN3_30B,
    contexts: [77, 300],
    splitTokens: 300,
    qkNorm: true,
    qkvSplits: 2,
  }),
];
