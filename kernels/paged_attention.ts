/**
 * Paged causal attention for prefill and any mix of sequences (queryLen >= 1 each), GQA,
 * online softmax in f32, reading every key and value (cached prefix and this step's new
 * tokens, already written by qk_norm_rope_cache) through the block tables. Also home of
 * the attention metadata packers and the CPU reference shared with paged_attention_decode.
 *
 * ```ts
 * const seqInfo = packSeqInfo(batch.seqs);                 // i32 [num_seqs, 3]
 * const { table, maxBlocks } = packBlockTables(batch.seqs, blockSize); // i32 [num_seqs, maxBlocks]
 * const p = { num_seqs: batch.seqs.length, num_q_heads: 32, num_kv_heads: 4, head_dim: 128,
 *   block_size: 16, max_blocks: maxBlocks, max_query_len: maxQueryLen(batch.seqs),
 *   scale: 1 / Math.sqrt(128) };
 * pass.dispatchWorkgroups(...spec.grid(p, variant, gpu));
 * ```
 *
 * Workgroup (q tile, seq, kv head): ROWS = 32 query rows = floor(32 / G) consecutive
 * tokens x the G = num_q_heads / num_kv_heads query heads of one kv head (G <= 32), so each
 * K/V tile staged in workgroup memory serves every query head of the group. 64 threads;
 * thread (lid / 8, lid % 8) keeps 4 rows in registers: their scores against BK / 8 keys of
 * the tile and 16 of their output dims (vec4 columns lid % 8 + 8k). Per key tile (BK = 16
 * keys with f16 K/V, 8 with f32): S = Q K^T and each thread's row maxima to workgroup
 * memory, barrier, P = exp(S - row max) to workgroup memory and the tile's V and next
 * tile's K (loaded into registers before S) stored, barrier, O += P V: two barriers a
 * tile, no serial step. Workgroup memory (workgroupBytes): q f32 [MAX_HD, 32 rows]
 * 16 KiB, K tile f32 [BK, MAX_HD + 4], V tile T [BK, MAX_HD], P f32 [BK, 32], row
 * maxima f32 [8, 32]: 32012 bytes (f16) and 26764 (f32) at MAX_HD 128, inside the 32 KiB
 * of lavapipe and many adapters. q stays f32 (the reference tolerance needs it), so 32
 * rows is as many as 32 KiB holds next to the K/V tiles.
 *
 * Bytes: q and out once, and per q tile the K/V of keys [0, last query position] (from L2
 * across tiles): every query token re-reads contextLen * num_kv_heads * head_dim * 2 *
 * sizeof(T) / floor(32 / G) bytes of K/V.
 */
import type { KernelCase, Tolerance } from "./case.ts";
import type { KernelSpec, Variant } from "./kernel.ts";
import { defineParams } from "./params.ts";
import { clampF16, roundToF16InPlace } from "../src/util/f16.ts";

const params = defineParams({
  num_seqs: "u32",
  num_q_heads: "u32",
  num_kv_heads: "u32",
  head_dim: "u32",
  block_size: "u32",
  /** Row stride of block_tables. */
  max_blocks: "u32",
  /** Largest queryLen of the batch (sets the number of q tiles). */
  max_query_len: "u32",
  /** Softmax scale, 1 / sqrt(head_dim). */
  scale: "f32",
});

/** Params of paged_attention. */
export type PagedAttentionParams = { readonly [K in keyof typeof params.fields]: number };

/** One sequence of a step as attention sees it (StepSequence satisfies it). */
export interface AttentionSeq {
  /** Index of the sequence's first new token in the step's token arrays. */
  readonly queryStart: number;
  /** New tokens of this step (>= 1); they sit at positions contextLen - queryLen ... */
  readonly queryLen: number;
  /** Tokens whose K/V are in the cache after this step's cache write. */
  readonly contextLen: number;
  /** Physical block ids covering positions [0, contextLen). */
  readonly blockTable: ArrayLike<number>;
}

/** Head counts and cache geometry shared by the attention kernels and their reference. */
export interface AttentionShape {
  readonly numQHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly blockSize: number;
}

/** `seq_info` i32 [num_seqs, 3]: (query_start, query_len, context_len) per sequence. */
export function packSeqInfo(seqs: readonly AttentionSeq[]): Int32Array {
  const out = new Int32Array(Math.max(1, seqs.length) * 3);
  seqs.forEach((s, i) => {
    if (!(s.queryLen >= 1) || s.contextLen < s.queryLen || s.queryStart < 0) {
      throw new Error(
        `attention seq ${i}: queryStart ${s.queryStart}, queryLen ${s.queryLen}, contextLen ${s.contextLen} (need queryLen >= 1, contextLen >= queryLen)`,
      );
    }
    out.set([s.queryStart, s.queryLen, s.contextLen], i * 3);
  });
  return out;
}

/**
 * `block_tables` i32 [num_seqs, maxBlocks], rows padded with block 0 (never read: the
 * kernels stop at contextLen). Throws when a table does not cover its contextLen.
 */
export function packBlockTables(
  seqs: readonly AttentionSeq[],
  blockSize: number,
  maxBlocks = Math.max(1, ...seqs.map((s) => Math.ceil(s.contextLen / blockSize))),
): { table: Int32Array; maxBlocks: number } {
  const table = new Int32Array(Math.max(1, seqs.length) * maxBlocks);
  seqs.forEach((s, i) => {
    const need = Math.ceil(s.contextLen / blockSize);
    if (s.blockTable.length < need) {
      throw new Error(
        `attention seq ${i}: block table has ${s.blockTable.length} blocks, contextLen ${s.contextLen} needs ${need}`,
      );
    }
    if (need > maxBlocks) {
      throw new Error(`attention seq ${i}: needs ${need} > ${maxBlocks} blocks`);
    }
    for (let b = 0; b < need; b++) table[i * maxBlocks + b] = s.blockTable[b];
  });
  return { table, maxBlocks };
}

/** The sequences packed by packSeqInfo and packBlockTables, read back (for references). */
export function unpackSeqs(
  seqInfo: Int32Array,
  blockTables: Int32Array,
  maxBlocks: number,
): AttentionSeq[] {
  const n = Math.floor(seqInfo.length / 3);
  return Array.from({ length: n }, (_, i) => ({
    queryStart: seqInfo[i * 3],
    queryLen: seqInfo[i * 3 + 1],
    contextLen: seqInfo[i * 3 + 2],
    blockTable: blockTables.subarray(i * maxBlocks, (i + 1) * maxBlocks),
  }));
}

/** The largest queryLen of a batch (the `max_query_len` param). */
export function maxQueryLen(seqs: readonly AttentionSeq[]): number {
  return Math.max(1, ...seqs.map((s) => s.queryLen));
}

/**
 * Throws a clear error when the head geometry does not fit a variant of paged_attention or
 * paged_attention_decode: head_dim a multiple of 4 with head_dim / 4 dividing WG, at most
 * MAX_HD; num_q_heads a multiple of num_kv_heads with at most `maxGroup` heads per group.
 */
export function checkAttentionGeometry(
  kernel: string,
  p: { num_q_heads: number; num_kv_heads: number; head_dim: number; block_size: number },
  variant: Variant,
  maxGroup: number,
): number {
  const c = variant.consts ?? {};
  const hd4 = p.head_dim / 4;
  if (!Number.isInteger(hd4) || hd4 < 1 || c.WG % hd4 !== 0 || p.head_dim > c.MAX_HD) {
    throw new Error(
      `${kernel}/${variant.name}: head_dim ${p.head_dim} unsupported (need a multiple of 4, head_dim/4 dividing ${c.WG}, <= ${c.MAX_HD})`,
    );
  }
  if (p.num_kv_heads < 1 || p.num_q_heads % p.num_kv_heads !== 0) {
    throw new Error(
      `${kernel}: num_q_heads ${p.num_q_heads} is not a multiple of num_kv_heads ${p.num_kv_heads}`,
    );
  }
  const group = p.num_q_heads / p.num_kv_heads;
  if (group > maxGroup) {
    throw new Error(
      `${kernel}/${variant.name}: ${group} query heads per kv head, at most ${maxGroup}`,
    );
  }
  if (!(p.block_size >= 1)) throw new Error(`${kernel}: block_size ${p.block_size}`);
  return group;
}

/**
 * Smallest head_dim paged_attention takes: below it most threads of a workgroup own no
 * output column (models have 64 or more).
 */
const MIN_HEAD_DIM = 16;

/**
 * Workgroup memory of a paged_attention variant in bytes: q_tile (MAX_HD x ROWS f32),
 * k_tile (BK x (MAX_HD + 4) f32), v_tile (BK x MAX_HD of T), p_tile (BK x ROWS f32),
 * m_tile ((WG / (ROWS / 4)) x ROWS f32) and 3 u32.
 */
export function workgroupBytes(v: Variant): number {
  const { WG, ROWS, BK, MAX_HD } = v.consts!;
  const t = v.dtype === "f16" ? 2 : 4;
  const cg = WG / (ROWS / 4);
  return 4 * (MAX_HD * ROWS + BK * (MAX_HD + 4) + BK * ROWS + cg * ROWS + 3) +
    t * BK * MAX_HD;
}

export const spec: KernelSpec<typeof params.fields> = {
  name: "paged_attention",
  shader: "paged_attention.wgsl",
  params,
  bindings: [
    { name: "q", type: "vec4<f32>", access: "read", shape: "[tokens, num_q_heads * head_dim / 4]" },
    {
      name: "k_cache",
      type: "vec4<T>",
      access: "read",
      shape: "[num_blocks, block_size, num_kv_heads, head_dim / 4]",
    },
    {
      name: "v_cache",
      type: "vec4<T>",
      access: "read",
      shape: "[num_blocks, block_size, num_kv_heads, head_dim / 4]",
    },
    { name: "block_tables", type: "i32", access: "read", shape: "[num_seqs, max_blocks]" },
    {
      name: "seq_info",
      type: "i32",
      access: "read",
      shape: "[num_seqs, 3] (query_start, query_len, context_len)",
    },
    {
      name: "out",
      type: "vec4<f32>",
      access: "read_write",
      shape: "[tokens, num_q_heads * head_dim / 4]",
    },
  ],
  variants: [
    // f32 K/V: two f32 tiles of BK = 16 keys would not fit 32 KiB beside q, so BK = 8.
    { name: "f32", dtype: "f32", consts: { WG: 64, ROWS: 32, BK: 8, MAX_HD: 128 } },
    { name: "f16", dtype: "f16", consts: { WG: 64, ROWS: 32, BK: 16, MAX_HD: 128 } },
  ],
  grid: (p, v, gpu) => {
    const { ROWS } = v.consts!;
    const group = checkAttentionGeometry("paged_attention", p, v, ROWS);
    if (p.head_dim < MIN_HEAD_DIM) {
      throw new Error(`paged_attention/${v.name}: head_dim ${p.head_dim} < ${MIN_HEAD_DIM}`);
    }
    const bytes = workgroupBytes(v);
    const limit = gpu.limits.maxComputeWorkgroupStorageSize;
    if (limit !== undefined && bytes > limit) {
      throw new Error(
        `paged_attention/${v.name}: ${bytes} bytes of workgroup memory, the device allows ${limit}`,
      );
    }
    const tokensPerTile = Math.floor(ROWS / group);
    return [Math.ceil(p.max_query_len / tokensPerTile), p.num_seqs, p.num_kv_heads];
  },
};

/** Partial attention of one query row over keys [keyStart, keyEnd): normalised output + lse. */
export interface AttentionPartial {
  /** sum_j softmax_j * v_j over the range, [head_dim]. */
  readonly out: Float64Array;
  /** log(sum_j exp(score_j)) of the range (scores already scaled); -Infinity when empty. */
  readonly lse: number;
}

/**
 * CPU reference of one query row (f64): query `qRow` of head `head` (its q at
 * q[(token * numQHeads + head) * headDim ...]) against the keys [keyStart, keyEnd) of
 * `seq`, read through its block table from the paged caches [blocks, blockSize, kvHeads,
 * headDim]. Causality is the caller's range (keyEnd <= query position + 1).
 */
export function attendRangeRef(
  q: Float32Array,
  token: number,
  head: number,
  kCache: Float32Array,
  vCache: Float32Array,
  seq: AttentionSeq,
  shape: AttentionShape,
  scale: number,
  keyStart: number,
  keyEnd: number,
): AttentionPartial {
  const { numQHeads, numKvHeads, headDim, blockSize } = shape;
  const kvHead = Math.floor(head / (numQHeads / numKvHeads));
  const qBase = (token * numQHeads + head) * headDim;
  const n = Math.max(0, keyEnd - keyStart);
  const scores = new Float64Array(n);
  const bases = new Int32Array(n);
  let m = -Infinity;
  for (let j = 0; j < n; j++) {
    const key = keyStart + j;
    const block = seq.blockTable[Math.floor(key / blockSize)];
    const slot = block * blockSize + (key % blockSize);
    const base = (slot * numKvHeads + kvHead) * headDim;
    bases[j] = base;
    let s = 0;
    for (let d = 0; d < headDim; d++) s += q[qBase + d] * kCache[base + d];
    scores[j] = s * scale;
    if (scores[j] > m) m = scores[j];
  }
  const out = new Float64Array(headDim);
  if (n === 0) return { out, lse: -Infinity };
  let sum = 0;
  for (let j = 0; j < n; j++) {
    const p = Math.exp(scores[j] - m);
    sum += p;
    for (let d = 0; d < headDim; d++) out[d] += p * vCache[bases[j] + d];
  }
  for (let d = 0; d < headDim; d++) out[d] /= sum;
  return { out, lse: m + Math.log(sum) };
}

/**
 * CPU reference of paged_attention and paged_attention_decode (one function for both):
 * for every sequence and every new token i (position contextLen - queryLen + i), every
 * query head attends the keys at positions <= its own through the block table.
 * Returns out f32 [numTokens, numQHeads * headDim]; rows of tokens outside every
 * sequence stay 0.
 */
export function pagedAttentionRef(
  q: Float32Array,
  kCache: Float32Array,
  vCache: Float32Array,
  seqs: readonly AttentionSeq[],
  shape: AttentionShape,
  scale: number,
  numTokens: number,
): Float32Array {
  const { numQHeads, headDim } = shape;
  const out = new Float32Array(numTokens * numQHeads * headDim);
  for (const seq of seqs) {
    for (let i = 0; i < seq.queryLen; i++) {
      const token = seq.queryStart + i;
      const position = seq.contextLen - seq.queryLen + i;
      for (let h = 0; h < numQHeads; h++) {
        const r = attendRangeRef(q, token, h, kCache, vCache, seq, shape, scale, 0, position + 1);
        out.set(r.out, (token * numQHeads + h) * headDim);
      }
    }
  }
  return out;
}

/** A batch of sequences for a test case: prefix lengths and query lengths. */
export interface AttentionCaseSeqs {
  readonly seqs: AttentionSeq[];
  readonly numTokens: number;
  /** Blocks in the cache (every sequence's blocks are distinct, shuffled). */
  readonly numBlocks: number;
}

/**
 * Lays out sequences (contextLen = prefix + query each) over shuffled distinct blocks of
 * a cache with a few spare blocks, tokens packed in order. Used by the case tables and
 * tests.
 */
export function layoutSeqs(
  shuffle: <X>(items: X[]) => X[],
  blockSize: number,
  lens: readonly { readonly prefix: number; readonly query: number }[],
): AttentionCaseSeqs {
  const blocksPer = lens.map((l) => Math.ceil((l.prefix + l.query) / blockSize));
  const numBlocks = blocksPer.reduce((a, b) => a + b, 0) + 3;
  const ids = shuffle([...Array(numBlocks).keys()]);
  let next = 0, queryStart = 0;
  const seqs = lens.map((l, i) => {
    const seq: AttentionSeq = {
      queryStart,
      queryLen: l.query,
      contextLen: l.prefix + l.query,
      blockTable: Int32Array.from(ids.slice(next, next + blocksPer[i])),
    };
    next += blocksPer[i];
    queryStart += l.query;
    return seq;
  });
  return { seqs, numTokens: queryStart, numBlocks };
}

/** Bytes of K and V a sequence set reads at least once (every context key once). */
export function kvBytes(seqs: readonly AttentionSeq[], shape: AttentionShape, v: Variant): number {
  const ctx = seqs.reduce((a, s) => a + s.contextLen, 0);
  return ctx * shape.numKvHeads * shape.headDim * 2 * (v.dtype === "f16" ? 2 : 4);
}

/** FLOPs of causal attention of a sequence set (QK^T and PV, 2 per multiply-add). */
export function attentionFlops(seqs: readonly AttentionSeq[], shape: AttentionShape): number {
  let pairs = 0;
  for (const s of seqs) {
    for (let i = 0; i < s.queryLen; i++) pairs += s.contextLen - s.queryLen + i + 1;
  }
  return pairs * shape.numQHeads * shape.headDim * 4;
}

/** A validation case of the prefill attention kernels: head geometry and sequences. */
export interface AttentionCaseShape extends AttentionShape {
  readonly label: string;
  readonly lens: readonly { readonly prefix: number; readonly query: number }[];
  /** Standard deviation of the keys (default 1.5): larger ones spread the scores. */
  readonly kStd?: number;
}

/** How a kernel computes, as its reference must mirror it. */
export interface AttentionCaseForm {
  /** q * scale is rounded to f16 before the products (the tensor-core kernel). */
  readonly qF16: boolean;
  readonly tolerance: Tolerance;
}

const FMA_FORM: AttentionCaseForm = { qF16: false, tolerance: { atol: 2e-5, rtol: 1e-4 } };

/** A case of paged_attention (or, with its form, of paged_attention_tc). */
export function attentionCase(
  c: AttentionCaseShape,
  form: AttentionCaseForm = FMA_FORM,
): KernelCase<typeof params.fields> {
  const { numQHeads, numKvHeads, headDim, blockSize } = c;
  const scale = 1 / Math.sqrt(headDim);
  const sizes = layoutSeqs((x) => x, blockSize, c.lens);
  const cacheElems = sizes.numBlocks * blockSize * numKvHeads * headDim;
  const qElems = sizes.numTokens * numQHeads * headDim;
  const { table, maxBlocks } = packBlockTables(sizes.seqs, blockSize);
  return {
    label: c.label,
    params: {
      num_seqs: c.lens.length,
      num_q_heads: numQHeads,
      num_kv_heads: numKvHeads,
      head_dim: headDim,
      block_size: blockSize,
      max_blocks: maxBlocks,
      max_query_len: maxQueryLen(sizes.seqs),
      scale,
    },
    inputs: (rng) => {
      const { seqs } = layoutSeqs((x) => rng.shuffle(x), blockSize, c.lens);
      return {
        q: rng.fillNormal(new Float32Array(qElems)),
        k_cache: rng.fillNormal(new Float32Array(cacheElems), c.kStd ?? 1.5),
        v_cache: rng.fillNormal(new Float32Array(cacheElems)),
        block_tables: packBlockTables(seqs, blockSize, maxBlocks).table,
        seq_info: packSeqInfo(seqs),
      };
    },
    outputs: { out: qElems },
    reference: (inp) => {
      const q = inp.q as Float32Array;
      return {
        out: pagedAttentionRef(
          form.qF16 ? roundToF16InPlace(clampF16(q.map((x) => x * scale))) : q,
          inp.k_cache as Float32Array,
          inp.v_cache as Float32Array,
          unpackSeqs(inp.seq_info as Int32Array, inp.block_tables as Int32Array, maxBlocks),
          c,
          form.qF16 ? 1 : scale,
          sizes.numTokens,
        ),
      };
    },
    tolerance: () => form.tolerance,
    bytes: (v) => kvBytes(sizes.seqs, c, v) + qElems * 8 + table.length * 4,
    flops: attentionFlops(sizes.seqs, c),
  };
}

/** Qwen3-30B-A3B's attention geometry. */
export const QWEN3_30B = { numQHeads: 32, numKvHeads: 4, headDim: 128, blockSize: 16 } as const;

export const cases: KernelCase<typeof params.fields>[] = [
  attentionCase({
    label: "1 seq, 3 new after 5 cached, bs=4 hd=16 q/kv=2/1",
    numQHeads: 2,
    numKvHeads: 1,
    headDim: 16,
    blockSize: 4,
    lens: [{ prefix: 5, query: 3 }],
  }),
  attentionCase({
    label: "3 seqs q=1,3,17 prefixes 6,0,13, bs=4 hd=32 q/kv=6/2",
    numQHeads: 6,
    numKvHeads: 2,
    headDim: 32,
    blockSize: 4,
    lens: [{ prefix: 6, query: 1 }, { prefix: 0, query: 3 }, { prefix: 13, query: 17 }],
  }),
  attentionCase({
    label: "2 seqs q=17,3 prefixes 21,9, bs=16 hd=128 q/kv=8/1",
    numQHeads: 8,
    numKvHeads: 1,
    headDim: 128,
    blockSize: 16,
    lens: [{ prefix: 21, query: 17 }, { prefix: 9, query: 3 }],
  }),
  attentionCase({
    label: "4 seqs q=23,9,1,14 prefixes 45,0,130,7, bs=16 hd=128 q/kv=16/2",
    numQHeads: 16,
    numKvHeads: 2,
    headDim: 128,
    blockSize: 16,
    lens: [
      { prefix: 45, query: 23 },
      { prefix: 0, query: 9 },
      { prefix: 130, query: 1 },
      { prefix: 7, query: 14 },
    ],
  }),
  attentionCase({
    label: "3 seqs q=7,2,11 prefixes 9,3,0, bs=5 hd=16 q/kv=10/2",
    numQHeads: 10,
    numKvHeads: 2,
    headDim: 16,
    blockSize: 5,
    lens: [{ prefix: 9, query: 7 }, { prefix: 3, query: 2 }, { prefix: 0, query: 11 }],
  }),
  attentionCase({
    label: "2 seqs q=3,2 prefixes 17,1, bs=4 hd=16 q/kv=32/1",
    numQHeads: 32,
    numKvHeads: 1,
    headDim: 16,
    blockSize: 4,
    lens: [{ prefix: 17, query: 3 }, { prefix: 1, query: 2 }],
  }),
  attentionCase({
    label: "Qwen3-30B-A3B prefill 1 x 2048",
    ...QWEN3_30B,
    lens: [{ prefix: 0, query: 2048 }],
  }),
  attentionCase({
    label: "Qwen3-30B-A3B chunk 512 after 1536 cached + 7 decodes at 1000",
    ...QWEN3_30B,
    lens: [{ prefix: 1536, query: 512 }, ...Array(7).fill({ prefix: 999, query: 1 })],
  }),
];
