/**
 * The merge after a split paged_attention_decode: for each sequence and query head,
 * out = sum_i w_i o_i / sum_i w_i with w_i = exp(lse_i - max lse) over the splits that hold
 * keys of the sequence (ceil(contextLen / split_tokens) of them). Dispatched only when
 * num_splits > 1; params are the decode's, and `write_f16`: the rows also go to out16 in the
 * storage type (the f16 forms: the o projection's tensor-core operand, with no cast_f16).
 *
 * ```ts
 * const p = { num_seqs, num_q_heads, head_dim, split_tokens: plan.splitTokens,
 *   num_splits: plan.numSplits, write_f16: 0 };
 * pass.dispatchWorkgroups(...spec.grid(p, variant, gpu)); // [num_q_heads, num_seqs, 1]
 * ```
 *
 * Bytes: part_o and part_lse of the used splits read once, out written once:
 * num_seqs * num_q_heads * (splits * (head_dim + 1) + head_dim) * 4.
 */
import type { KernelCase } from "./case.ts";
import type { KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";
import { EMPTY_SPLIT_LSE } from "./paged_attention_decode.ts";

const params = defineParams({
  num_seqs: "u32",
  num_q_heads: "u32",
  head_dim: "u32",
  split_tokens: "u32",
  num_splits: "u32",
  /** 1: the rows also go to out16 (T, clamped to f16's range); 0: out16 is not written. */
  write_f16: "u32",
});

/** Params of paged_attention_decode_reduce. */
export type PagedAttentionDecodeReduceParams = {
  readonly [K in keyof typeof params.fields]: number;
};

export const spec: KernelSpec<typeof params.fields> = {
  name: "paged_attention_decode_reduce",
  shader: "paged_attention_decode_reduce.wgsl",
  params,
  bindings: [
    {
      name: "seq_info",
      type: "i32",
      access: "read",
      shape: "[num_seqs, 3] (query_start, query_len = 1, context_len)",
    },
    {
      name: "part_o",
      type: "vec4<f32>",
      access: "read",
      shape: "[num_seqs, num_q_heads, num_splits, head_dim / 4]",
    },
    { name: "part_lse", type: "f32", access: "read", shape: "[num_seqs, num_q_heads, num_splits]" },
    {
      name: "out",
      type: "vec4<f32>",
      access: "read_write",
      shape: "[tokens, num_q_heads * head_dim / 4]",
    },
    {
      name: "out16",
      type: "vec4<T>",
      access: "read_write",
      shape: "[tokens, num_q_heads * head_dim / 4] (where write_f16; any buffer else)",
    },
  ],
  // "f32": one group of 32 invocations walks every split; "f32-wg256": 8 groups share them;
  // "f16", "f16-wg256": the same, out16 in f16
  variants: [
    { name: "f32", dtype: "f32", consts: { WG: 32 } },
    { name: "f32-wg256", dtype: "f32", consts: { WG: 256 } },
    { name: "f16", dtype: "f16", consts: { WG: 32 } },
    { name: "f16-wg256", dtype: "f16", consts: { WG: 256 } },
  ],
  grid: (p) => {
    if (p.head_dim % 4 !== 0) throw new Error(`decode reduce: head_dim ${p.head_dim} % 4 != 0`);
    if (p.num_q_heads > 65535 || p.num_seqs > 65535) {
      throw new Error(`decode reduce: ${p.num_q_heads} heads x ${p.num_seqs} seqs too many`);
    }
    return [p.num_q_heads, p.num_seqs, 1];
  },
};

/** CPU reference of the log-sum-exp merge (f64); rows of tokens without a sequence stay 0. */
export function mergeSplitsRef(
  seqInfo: Int32Array,
  partO: Float32Array,
  partLse: Float32Array,
  numQHeads: number,
  headDim: number,
  splitTokens: number,
  numSplits: number,
  numTokens: number,
): Float32Array {
  const out = new Float32Array(numTokens * numQHeads * headDim);
  const numSeqs = seqInfo.length / 3;
  for (let s = 0; s < numSeqs; s++) {
    const row = seqInfo[s * 3] + seqInfo[s * 3 + 1] - 1;
    const n = Math.min(numSplits, Math.ceil(seqInfo[s * 3 + 2] / splitTokens));
    for (let h = 0; h < numQHeads; h++) {
      const base = (s * numQHeads + h) * numSplits;
      let m = -Infinity;
      for (let i = 0; i < n; i++) m = Math.max(m, partLse[base + i]);
      const acc = new Float64Array(headDim);
      let wsum = 0;
      for (let i = 0; i < n; i++) {
        const w = Math.exp(partLse[base + i] - m);
        wsum += w;
        for (let d = 0; d < headDim; d++) acc[d] += w * partO[(base + i) * headDim + d];
      }
      for (let d = 0; d < headDim; d++) {
        out[(row * numQHeads + h) * headDim + d] = acc[d] / wsum;
      }
    }
  }
  return out;
}

function reduceCase(
  contexts: readonly number[],
  numQHeads: number,
  headDim: number,
  splitTokens: number,
  label: string,
  writeF16 = false,
): KernelCase<typeof params.fields> {
  const numSeqs = contexts.length;
  const numSplits = Math.ceil(Math.max(...contexts) / splitTokens);
  const lseElems = numSeqs * numQHeads * numSplits;
  const outElems = numSeqs * numQHeads * headDim;
  return {
    label:
      `${label}: ${numSeqs} seqs, ${numQHeads} heads x ${headDim}, ${numSplits} x ${splitTokens}${
        writeF16 ? " +f16 rows" : ""
      }`,
    params: {
      num_seqs: numSeqs,
      num_q_heads: numQHeads,
      head_dim: headDim,
      split_tokens: splitTokens,
      num_splits: numSplits,
      write_f16: writeF16 ? 1 : 0,
    },
    inputs: (rng) => {
      const seqInfo = new Int32Array(numSeqs * 3);
      contexts.forEach((ctx, s) => seqInfo.set([s, 1, ctx], s * 3));
      const partLse = new Float32Array(lseElems);
      for (let s = 0; s < numSeqs; s++) {
        const used = Math.ceil(contexts[s] / splitTokens);
        for (let i = 0; i < numQHeads * numSplits; i++) {
          partLse[s * numQHeads * numSplits + i] = i % numSplits < used
            ? rng.float() * 12 - 4
            : EMPTY_SPLIT_LSE;
        }
      }
      return {
        seq_info: seqInfo,
        part_o: rng.fillNormal(new Float32Array(lseElems * headDim)),
        part_lse: partLse,
        // not written without write_f16: any 16 bytes
        ...(writeF16 ? {} : { out16: new Float32Array(4) }),
      };
    },
    outputs: writeF16 ? { out: outElems, out16: outElems } : { out: outElems },
    reference: (inp) => {
      const out = mergeSplitsRef(
        inp.seq_info as Int32Array,
        inp.part_o as Float32Array,
        inp.part_lse as Float32Array,
        numQHeads,
        headDim,
        splitTokens,
        numSplits,
        numSeqs,
      );
      const want: Record<string, Float32Array> = { out };
      if (writeF16) want.out16 = out;
      return want;
    },
    // (out16 in the f16 forms: f16 rounding, 2^-11 of a value)
    tolerance: (v) =>
      writeF16 && v.dtype === "f16" ? { atol: 1e-6, rtol: 1e-3 } : { atol: 1e-6, rtol: 1e-5 },
    // out is f32 in every form, from the same f32 sums as out16: the f32 bound
    bindingTolerances: () => ({ out: { atol: 1e-6, rtol: 1e-5 } }),
    bytes: () => lseElems * (headDim + 1) * 4 + outElems * 4 + numSeqs * 12,
    flops: lseElems * headDim * 2,
  };
}

/**
 * The variant for `numSplits` splits: past REDUCE_WIDE_SPLITS, 8 groups of invocations share the
 * splits (`f32-wg256`); else one group walks them (`f32`); with `f16Rows`, their f16 twins
 * (which write out16 where write_f16 says so).
 */
export function reduceVariant(numSplits: number, f16Rows = false): string {
  const dtype = f16Rows ? "f16" : "f32";
  return numSplits > REDUCE_WIDE_SPLITS ? `${dtype}-wg256` : dtype;
}

/**
 * Splits past which the merge takes `f32-wg256`. On the H200 (2026-12-02, perf-attention) the
 * one-group merge took about 5.7 µs a layer at 3 and 6 splits (128 x 1024, 64 x 8192) and 11.5
 * at 47 and 48 (8 x 8192, 8 x 131072): its chain of loads, one split after another.
 */
export const REDUCE_WIDE_SPLITS = 8;

export const cases: KernelCase<typeof params.fields>[] = [
  reduceCase([7, 1, 23], 3, 16, 5, "tiny"),
  reduceCase([150, 37], 8, 128, 48, "small"),
  reduceCase(Array(64).fill(1024), 32, 128, 256, "Qwen3-30B-A3B decode 64 x 1024"),
  reduceCase(Array(8).fill(8192), 32, 128, 256, "Qwen3-30B-A3B decode 8 x 8192"),
  // many splits (the 8-group form's groups take 5 or 6 each), and two runs of 32 columns with
  // sequences of different split counts
  reduceCase(Array(8).fill(8192), 32, 128, 176, "Qwen3-30B-A3B decode 8 x 8192 in 47 splits"),
  reduceCase([1000, 300, 17], 4, 256, 16, "head_dim 256"),
  reduceCase([7, 1, 23], 3, 16, 5, "tiny", true),
  reduceCase(Array(8).fill(8192), 32, 128, 176, "Qwen3-30B-A3B decode 8 x 8192 in 47 splits", true),
];
