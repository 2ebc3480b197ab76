/**
 * Split-K paged attention for decode (queryLen = 1 per sequence): workgroup (split, seq,
 * kv head) attends the sequence's query with the G = num_q_heads / num_kv_heads query
 * heads of one kv head over keys [split * split_tokens, (split + 1) * split_tokens) of its
 * context, reading each K/V row once for the whole group. With num_splits = 1 it writes the
 * result to `out` itself; with more, it writes per-split partials (normalised output and
 * log-sum-exp) that paged_attention_decode_reduce merges into `out`.
 *
 * The host picks split_tokens and num_splits from the step's context lengths:
 * ```ts
 * const plan = planDecodeSplits(batch.seqs.map((s) => s.contextLen), shape, variant);
 * const p = { ...common, split_tokens: plan.splitTokens, num_splits: plan.numSplits };
 * pass.dispatchWorkgroups(...spec.grid(p, variant, gpu));            // this kernel
 * if (plan.numSplits > 1) pass.dispatchWorkgroups(...reduce.spec.grid(...)); // the merge
 * ```
 *
 * The group is padded to GMAX = 8 query heads (zero queries), so a split holds at most
 * SCORES / GMAX = 512 keys whatever G is; G > 8 is refused. The tensor-core forms have no score
 * buffer: SCORES / GMAX caps their splits at 512 keys (`f16-tcdw`) or 4096 (`f16-tcdw2`,
 * `f16-tcdw4`).
 *
 * The tensor-core variant `f16-tcdw` (shaders/paged_attention_decode_tcdw.wgsl) takes the G
 * query heads of a kv head as the rows of 16 x 16 x 16 f16 subgroup-matrix products, one
 * subgroup of 32 a workgroup, the K and V matrices staged through workgroup memory 16 keys a
 * step, online softmax with a lazy max (P <= e^8 as f16); G <= 16, head_dim 128, a step's keys
 * inside one block (block_size and split_tokens multiples of 16): see tcDecodeReason.
 * `f16-tcdw2` and `f16-tcdw4` split the head's dims among 2 or 4 such subgroups (the model's
 * default is f16-tcdw2). q * scale and P are rounded to f16, so their cases compare with a
 * looser tolerance (TC_TOLERANCE).
 *
 * Bytes: every context key's K and V once (sum(contextLen) * kv_heads * head_dim * 2 *
 * sizeof(T)), q once, and, with splits, num_seqs * num_q_heads * num_splits * (head_dim + 1)
 * f32 of partials written here and read by the merge.
 */
import type { HostArray, KernelCase, Tolerance } from "./case.ts";
import type { KernelSpec, Variant } from "./kernel.ts";
import { defineParams } from "./params.ts";
import { tcHeadsReason } from "./paged_attention_tc.ts";
import {
  attendRangeRef,
  attentionFlops,
  type AttentionSeq,
  type AttentionShape,
  checkAttentionGeometry,
  kvBytes,
  layoutSeqs,
  packBlockTables,
  packSeqInfo,
  pagedAttentionRef,
  unpackSeqs,
} from "./paged_attention.ts";

const params = defineParams({
  num_seqs: "u32",
  num_q_heads: "u32",
  num_kv_heads: "u32",
  head_dim: "u32",
  block_size: "u32",
  /** Row stride of block_tables. */
  max_blocks: "u32",
  /** Keys per split (at most the variant's SCORES / GMAX; see planDecodeSplits). */
  split_tokens: "u32",
  /** Splits per sequence; num_splits * split_tokens must cover every contextLen. */
  num_splits: "u32",
  /** Softmax scale, 1 / sqrt(head_dim). */
  scale: "f32",
});

/** Params of paged_attention_decode. */
export type PagedAttentionDecodeParams = { readonly [K in keyof typeof params.fields]: number };

/** The "no keys" log-sum-exp an empty split writes (finite: WGSL need not keep infinities). */
export const EMPTY_SPLIT_LSE = -1e30;

const CONSTS = { WG: 128, GMAX: 8, MAX_HD: 128, SCORES: 4096 } as const;
// The tiled form keeps no per-split score buffer; SCORES only keeps its split plan equal.
// TK keys a tile (its K and V tiles are held as stored): f16 takes 32 over 256 invocations,
// f32 16 over 128 (within 32 KiB of workgroup memory, lavapipe's limit); either way a
// thread loads 4 K and 4 V elements a tile and computes one score (TK * GMAX = WG);
// OUT_PER_THREAD = GMAX * MAX_HD / 4 / WG.
const TILED = { GMAX: 8, MAX_HD: 128, SCORES: 4096 } as const;
const TILED_F32 = { ...TILED, WG: 128, TK: 16, OUT_PER_THREAD: 2 } as const;
const TILED_F16 = { ...TILED, WG: 256, TK: 32, OUT_PER_THREAD: 1 } as const;

/** The head size of the tensor-core variants (their loops over head_dim are unrolled). */
const TC_HD = 128;
/** Rows of the tensor-core variants' matrices: at most 16 query heads a kv head. */
const TC_ROWS = 16;

/**
 * The tensor-core variant (`f16-tcdw`): 16 keys a step, K and V bound as 16-byte words (each
 * step's keys arrive as 16 vec4<u32> loads a lane, loaded one step ahead, and the K^T and V
 * matrices load from workgroup memory), q's matrices in registers. No score buffer: SCORES only
 * keeps the split plan equal to the other forms' (512 keys a split) with GMAX = 16 matrix rows.
 * On the H200 (2026-12-01) it took 64 x 8192 decode steps from 68.6 ms (`f16-tcd`, since
 * removed: the same products with the K and V matrices loaded straight from the cache, which
 * cost an SM 28-55x more, probe-sgmat) to 56.2; q in workgroup memory (4.3 KB more a workgroup)
 * made it 10% slower, a second K/V buffer 12%.
 */
const TCDW: Variant = {
  name: "f16-tcdw",
  // K and V declared read_write (still 16-byte words): on the H200 (session 34, perf-attention,
  // one run each way) f16-tcdw2h read 64 x 8192 in 280.2 µs with them read_write against 308.4
  // read-only (86.8% of the roof against 78.9%), 8 x 131072 in 552.4 against 605.9 (88.1%
  // against 80.3%), and 8 / 32 x 1024 decode steps took 11.49 / 22.37 ms against 11.52 /
  // 22.45; f16-tiled (8-byte loads) read the same either way (1014 against 1016 µs)
  readWrite: ["k_cache", "v_cache"],
  dtype: "f16",
  subgroupMatrix: { m: 16, n: 16, k: 16 },
  wideWords: true,
  shader: "paged_attention_decode_tcdw.wgsl",
  consts: { WG: 32, GMAX: TC_ROWS, MAX_HD: TC_HD, SCORES: 512 * TC_ROWS, HD: TC_HD, KT: 16 },
};

/**
 * Keys a split of the several-subgroup tensor-core variants may take (no score buffer bounds
 * them; SCORES only carries this bound to planDecodeSplits). At 1024 a plan of 12 splits of 688
 * keys at 64 x 8192 (3072 workgroups, two of the H200's waves of them) read 72% of the roof where
 * 16 splits of 512 read 67% (perf-attention, 2026-12-01); at 4096 one wave fits there, 6 splits
 * of 1376 keys, 73.6% against 72.5%, and at 8 x 131072 48 splits of 2736 keys read 75.5% against
 * 73.0% in three waves of 912 and 68.9% in 128 splits of 1024 (2026-12-02).
 */
const TC_SPLIT_KEYS = 4096;

/**
 * The several-subgroup tensor-core variants (`f16-tcdw2`, `f16-tcdw4`): f16-tcdw's steps with
 * the head's dims split among 2 or 4 subgroups of a workgroup, each holding its share of q's
 * and O's matrices and loading its share of a step's words (shaders/
 * paged_attention_decode_tcdw2.wgsl; the shares of S meet in workgroup memory, where the
 * softmax adds them). On the H200 (2026-12-01, perf-attention, one layer) `f16-tcdw` read 64%
 * of the roof at 64 x 8192 and 36-48% at 64 and 128 x 1024; with its loads served from cache it
 * still took 212 µs at 64 x 8192 (89% of the time the KV bytes take at the roof: the one
 * subgroup's chain of work, not the memory, bounds it), and with its softmax and products left
 * out it read 83%. f16-tcdw2 read 66% at 64 x 8192 and 46-55% at 64 and 128 x 1024 (splits of
 * 128 and 256 keys) and took those decode steps 0.9-1.3 ms faster; f16-tcdw4 (four subgroups
 * and four barriers' worth of waiting a step) read 54% at 64 x 8192. Steps of 32 keys (two
 * 16-key halves staged and multiplied under one step's barriers, twice the words a lane in
 * flight, 14.7 KB of workgroup memory) were much slower in a lab form (2026-12-01, same call):
 * f16-tcdw2 with them read 39% at 64 x 8192 (against 67%), 40% at 8 x 131072 (64%) and 32%
 * at 128 x 1024 (54%); with four subgroups 18-31%.
 */
const TCDW2: Variant = {
  ...TCDW,
  name: "f16-tcdw2",
  perSubgroupMatrices: true,
  shader: "paged_attention_decode_tcdw2.wgsl",
  consts: { ...TCDW.consts, WG: 64, SCORES: TC_SPLIT_KEYS * TC_ROWS, HALF: 0, SPAD: 1 },
};
const TCDW4: Variant = { ...TCDW2, name: "f16-tcdw4", consts: { ...TCDW2.consts, WG: 128 } };
/**
 * f16-tcdw2 whose softmax takes only the first 8 of the matrices' 16 rows (HALF): for groups of
 * at most 8 query heads a kv head (Qwen3-30B-A3B's 8, Mixtral's 4), where rows 8-15 are padding.
 * The 64 invocations then score 2 keys of a step each instead of 4 (tcHalfRowsReason). The rows
 * of S and P are not padded (SPAD 0): 6,984 bytes of workgroup memory against f16-tcdw2's 7,752,
 * meant to pass under the H200's step from 6 workgroups an SM to 7 (48 KB of workgroup memory an
 * SM), which it does not: 3 splits of 2736 keys in perf-attention (session 34) read 79.5% of the
 * roof in 792 workgroups (66 x 8192, 6 on each of 132 SMs) and 49-52% in 840-960, a second wave,
 * so something else (most likely its registers) holds it at 6. On the H200 (2026-12-03,
 * perf-attention, the model's plans, two runs alternating) the split kernel took 304.3 / 304.0
 * µs at 64 x 8192 against 306.6 / 306.1 padded (78.6-78.7% of the roof with the merge, against
 * 78.1-78.2%), and
 * 599.6 / 598.8 at 8 x 131072 against 603.8 (80.2-80.4%, against 79.8%; the padded form's second
 * run read 674.4, an outlier); 64 and 128 x 1024 within 0.5 µs. K/V's rows padded by 8 bytes
 * instead of 16 as well (6,856 bytes) was 11-20% slower.
 */
const TCDW2H: Variant = {
  ...TCDW2,
  name: "f16-tcdw2h",
  consts: { ...TCDW2.consts, HALF: 1, SPAD: 0 },
};

/** Why f16-tcdw2h cannot take a layer's heads (more than 8 query heads a kv head), or null. */
export function tcHalfRowsReason(p: { num_q_heads: number; num_kv_heads: number }): string | null {
  const group = p.num_q_heads / p.num_kv_heads;
  return group > TC_ROWS / 2
    ? `${group} query heads a kv head (f16-tcdw2h's softmax takes ${TC_ROWS / 2})`
    : null;
}

/**
 * Workgroup memory of a tensor-core variant in bytes (the shader's struct Wg): the step's K,
 * then its V, f16 [KT, HD + 8] (q staged there before the first step), P f16 [16, KT + 8], S
 * f32 [16, KT + 4] a subgroup, with several subgroups an f32 factor a row, 2 flags: 6,408
 * bytes for f16-tcdw, 7,752 for f16-tcdw2, 10,312 for f16-tcdw4, 6,984 for f16-tcdw2h (rows of S
 * and P unpadded).
 */
export function tcDecodeWorkgroupBytes(v: Variant): number {
  const { KT: kt, HD: hd, WG: wg, SPAD: spad = 1 } = v.consts!;
  const subgroups = wg / 32;
  // f16-tcdw2: an S tile a subgroup and a factor a row
  const rowFactors = subgroups > 1 ? TC_ROWS * 4 : 0;
  // K/V's rows padded by 16 bytes, P's and S's too where SPAD (f16-tcdw: always)
  return kt * (hd + 8) * 2 + TC_ROWS * (kt + 8 * spad) * 2 +
    subgroups * TC_ROWS * (kt + 4 * spad) * 4 + rowFactors + 8;
}

/**
 * Why the tensor-core variant (`f16-tcdw`) cannot take these params, or null: head_dim 128, at
 * most 16 query heads a kv head (tcHeadsReason), and a step's 16 keys inside one block
 * (block_size and, with several splits, split_tokens multiples of 16).
 */
export function tcDecodeReason(
  p: {
    num_q_heads: number;
    num_kv_heads: number;
    head_dim: number;
    block_size: number;
    split_tokens: number;
    num_splits: number;
  },
): string | null {
  const heads = tcHeadsReason(p);
  if (heads) return heads;
  if (p.block_size % 16 !== 0) return `block_size ${p.block_size} is not a multiple of 16`;
  if (p.num_splits > 1 && p.split_tokens % 16 !== 0) {
    return `split_tokens ${p.split_tokens} is not a multiple of 16`;
  }
  return null;
}

/** The one-key-per-lane forms, f16 and f32, for subgroups of 8 and of 32 (4 subgroups each). */
function lanesVariants(): Variant[] {
  return [8, 32].flatMap((sg) =>
    (["f16", "f32"] as const).map((dtype) => ({
      name: `${dtype}-lanes${sg}`,
      dtype,
      packed: dtype === "f16",
      shader: "paged_attention_decode_lanes.wgsl",
      consts: { WG: 4 * sg, SG: sg, GMAX: 8, MAX_HD: 128, SCORES: 4096 },
      subgroups: true,
      minSubgroupSize: sg,
      subgroupSize: sg,
    }))
  );
}

export const spec: KernelSpec<typeof params.fields> = {
  name: "paged_attention_decode",
  shader: "paged_attention_decode.wgsl",
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
      shape: "[num_seqs, 3] (query_start, query_len = 1, context_len)",
    },
    {
      name: "out",
      type: "vec4<f32>",
      access: "read_write",
      shape: "[tokens, num_q_heads * head_dim / 4] (written when num_splits = 1)",
    },
    {
      name: "part_o",
      type: "vec4<f32>",
      access: "read_write",
      shape: "[num_seqs, num_q_heads, num_splits, head_dim / 4] (when num_splits > 1)",
    },
    {
      name: "part_lse",
      type: "f32",
      access: "read_write",
      shape: "[num_seqs, num_q_heads, num_splits] (when num_splits > 1)",
    },
  ],
  variants: [
    { name: "f32", dtype: "f32", consts: CONSTS },
    { name: "f16", dtype: "f16", consts: CONSTS },
    // K/V tiles loaded with every load of a tile in flight (the next tile's during this one's
    // math), stored to workgroup memory as T, online softmax.
    {
      name: "f32-tiled",
      dtype: "f32",
      shader: "paged_attention_decode_tiled.wgsl",
      consts: TILED_F32,
    },
    {
      name: "f16-tiled",
      dtype: "f16",
      shader: "paged_attention_decode_tiled.wgsl",
      consts: TILED_F16,
    },
    // The f16 forms with K and V read as 32-bit words (see `packed`).
    { name: "f16-packed", dtype: "f16", packed: true, consts: CONSTS },
    {
      name: "f16-tiled-packed",
      dtype: "f16",
      packed: true,
      shader: "paged_attention_decode_tiled.wgsl",
      consts: TILED_F16,
    },
    // One key per lane, subgroup softmax, no barrier in the key loop (f16 read as 32-bit
    // words); `lanes8` for subgroups of 8 (lavapipe), `lanes32` for 32 (NVIDIA).
    ...lanesVariants(),
    // Tensor cores (f16 subgroup matrices), K/V staged through workgroup memory.
    TCDW,
    TCDW2,
    TCDW4,
    TCDW2H,
  ],
  grid: (p, v, gpu) => {
    if (v.subgroupMatrix) {
      const reason = tcDecodeReason(p) ?? (v.consts?.HALF ? tcHalfRowsReason(p) : null);
      if (reason) throw new Error(`paged_attention_decode/${v.name}: ${reason}`);
      const bytes = tcDecodeWorkgroupBytes(v);
      const limit = gpu?.limits?.maxComputeWorkgroupStorageSize;
      if (limit !== undefined && bytes > limit) {
        throw new Error(
          `paged_attention_decode/${v.name}: ${bytes} bytes of workgroup memory, the device allows ${limit}`,
        );
      }
    }
    checkAttentionGeometry("paged_attention_decode", p, v, v.consts!.GMAX);
    if (!(p.split_tokens >= 1) || p.split_tokens * v.consts!.GMAX > v.consts!.SCORES) {
      throw new Error(
        `paged_attention_decode/${v.name}: split_tokens ${p.split_tokens} x ${
          v.consts!.GMAX
        } heads exceeds ${v.consts!.SCORES} scores (use planDecodeSplits)`,
      );
    }
    if (!(p.num_splits >= 1) || p.num_splits > 65535) {
      throw new Error(`paged_attention_decode: num_splits ${p.num_splits} out of 1..65535`);
    }
    // kv head fastest (decode_ids in shaders/lib/decode_split.wgsl)
    return [p.num_kv_heads, p.num_splits, p.num_seqs];
  },
};

/** How a decode step's keys are cut into splits. */
export interface DecodeSplitPlan {
  /** Keys per split (params.split_tokens). */
  readonly splitTokens: number;
  /** Splits per sequence (params.num_splits): ceil(max contextLen / splitTokens). */
  readonly numSplits: number;
}

/**
 * A split plan's workgroup budget: about this many (split, seq, kv head) workgroups a step, or
 * `{ wave }`: the fewest whole waves of `wave` workgroups (as many as the GPU holds at once)
 * whose splits fit the variant, each sequence's keys cut into as many splits as the waves hold.
 */
export type DecodeSplitTarget = number | { readonly wave: number };

/**
 * Chooses split_tokens so that the step's (seq, kv head, split) workgroups number about
 * `target` (enough to fill the GPU; or whole waves, see {@link DecodeSplitTarget}), never
 * fewer than `minSplitTokens` keys a split (merging costs), never more than the variant's
 * score buffer holds. One split means no merge dispatch.
 *
 * ```ts
 * planDecodeSplits(Array(64).fill(1024), { numQHeads: 32, numKvHeads: 4 }, variant);
 * // { splitTokens: 256, numSplits: 4 }: 64 x 4 x 4 = 1024 workgroups
 * planDecodeSplits(Array(64).fill(1024), { numQHeads: 32, numKvHeads: 4 }, tcdw2, { wave: 1536 });
 * // { splitTokens: 176, numSplits: 6 }: 64 x 4 x 6 = 1536 workgroups, one wave
 * ```
 */
export function planDecodeSplits(
  contextLens: ArrayLike<number>,
  shape: Pick<AttentionShape, "numQHeads" | "numKvHeads">,
  variant: Variant,
  target: DecodeSplitTarget = 1024,
  minSplitTokens = 64,
): DecodeSplitPlan {
  const group = shape.numQHeads / shape.numKvHeads;
  const scoreCap = variant.consts?.SCORES;
  const gmax = variant.consts?.GMAX;
  if (!scoreCap || !gmax) {
    throw new Error(`planDecodeSplits: variant ${variant.name} has no SCORES`);
  }
  if (!Number.isInteger(group) || group < 1 || group > gmax) {
    throw new Error(`planDecodeSplits: ${shape.numQHeads} q heads / ${shape.numKvHeads} kv heads`);
  }
  let total = 0, longest = 1;
  for (let i = 0; i < contextLens.length; i++) {
    if (!(contextLens[i] >= 1)) throw new Error(`planDecodeSplits: contextLen ${contextLens[i]}`);
    total += contextLens[i];
    longest = Math.max(longest, contextLens[i]);
  }
  const maxSplit = Math.floor(scoreCap / gmax);
  const align = (n: number) => (n >= 16 ? Math.ceil(n / 16) * 16 : n);
  const cap = maxSplit >= 16 ? Math.floor(maxSplit / 16) * 16 : maxSplit;
  let split: number;
  if (typeof target === "number") {
    split = align(Math.max(minSplitTokens, Math.ceil((total * shape.numKvHeads) / target)));
  } else {
    if (!(target.wave >= 1)) throw new Error(`planDecodeSplits: wave ${target.wave}`);
    // k waves hold floor(k wave / pairs) splits a sequence; the first k whose splits fit
    const pairs = contextLens.length * shape.numKvHeads;
    for (let k = 1;; k++) {
      const splits = Math.max(1, Math.floor((k * target.wave) / pairs));
      const keys = Math.ceil(longest / splits);
      split = align(Math.max(minSplitTokens, keys));
      // (more waves cannot shrink a split held up by minSplitTokens: the cap below takes it)
      if (split <= maxSplit || keys <= minSplitTokens) break;
    }
  }
  if (split > maxSplit) split = cap;
  if (split >= longest) return { splitTokens: Math.min(longest, maxSplit), numSplits: 1 };
  return { splitTokens: split, numSplits: Math.ceil(longest / split) };
}

/** Elements of part_o and part_lse for a plan (allocate at least 1 each). */
export function decodePartialsSize(
  numSeqs: number,
  numQHeads: number,
  headDim: number,
  numSplits: number,
): { partO: number; partLse: number } {
  const lse = numSplits > 1 ? numSeqs * numQHeads * numSplits : 0;
  return { partO: Math.max(4, lse * headDim), partLse: Math.max(1, lse) };
}

/**
 * CPU reference of the per-split partials (the same attendRangeRef as the full reference):
 * part_o [seqs, heads, splits, head_dim] normalised over each split's keys, part_lse
 * [seqs, heads, splits] (EMPTY_SPLIT_LSE and zeros for a split past the context).
 */
export function decodePartialsRef(
  q: Float32Array,
  kCache: Float32Array,
  vCache: Float32Array,
  seqs: readonly AttentionSeq[],
  shape: AttentionShape,
  scale: number,
  plan: DecodeSplitPlan,
): { partO: Float32Array; partLse: Float32Array } {
  const { numQHeads, headDim } = shape;
  const { splitTokens, numSplits } = plan;
  const partO = new Float32Array(seqs.length * numQHeads * numSplits * headDim);
  const partLse = new Float32Array(seqs.length * numQHeads * numSplits).fill(EMPTY_SPLIT_LSE);
  seqs.forEach((seq, s) => {
    const token = seq.queryStart + seq.queryLen - 1;
    for (let h = 0; h < numQHeads; h++) {
      for (let i = 0; i < numSplits; i++) {
        const start = i * splitTokens;
        if (start >= seq.contextLen) continue;
        const end = Math.min(seq.contextLen, start + splitTokens);
        const r = attendRangeRef(q, token, h, kCache, vCache, seq, shape, scale, start, end);
        const at = (s * numQHeads + h) * numSplits + i;
        partO.set(r.out, at * headDim);
        partLse[at] = r.lse;
      }
    }
  });
  return { partO, partLse };
}

export interface DecodeCaseShape extends AttentionShape {
  readonly label: string;
  readonly contexts: readonly number[];
  /** Forced split length (default: planDecodeSplits with the default target). */
  readonly splitTokens?: number;
  /** Standard deviation of the keys (default 1.5): larger ones spread the scores. */
  readonly kStd?: number;
  /** The tensor-core variants' tolerance (default TC_TOLERANCE). */
  readonly tcTolerance?: Tolerance;
}

/** The FMA forms: f32 math on the (f16) K/V as stored. */
const FMA_TOLERANCE: Tolerance = { atol: 2e-5, rtol: 1e-4 };

/**
 * The tensor-core variants round q * scale and P to f16 (2^-11 relative each), where the
 * reference (shared by every variant of a storage type) keeps them exact: a score moves by
 * about 2^-12 |q * scale| |k| sqrt(head_dim) (some 4e-4 at keys of std 1.5), a weight by 2^-11.
 * An emulation of the shader (its arithmetic on lavapipe: f16 q * scale and P, f32 sums) used at
 * most half of a 2e-3 bound on the cases here; 3e-3 leaves a margin of 3.
 */
const TC_TOLERANCE: Tolerance = { atol: 3e-3, rtol: 3e-3 };

/**
 * The variants that can take a case's params (undefined: all of them): the tensor-core ones
 * where tcDecodeReason allows, each where its splits may be split_tokens long.
 */
export function caseVariants(p: Parameters<typeof tcDecodeReason>[0]): string[] | undefined {
  const tc = tcDecodeReason(p) === null;
  const take = spec.variants.filter((v) =>
    (tc || !v.subgroupMatrix) && p.split_tokens * v.consts!.GMAX <= v.consts!.SCORES &&
    (!v.consts?.HALF || tcHalfRowsReason(p) === null)
  );
  return take.length === spec.variants.length ? undefined : take.map((v) => v.name);
}

/** A decode case of these sequences (q, caches, block tables drawn by the case's rng). */
export function decodeCase(c: DecodeCaseShape): KernelCase<typeof params.fields> {
  const { numQHeads, numKvHeads, headDim, blockSize } = c;
  const scale = 1 / Math.sqrt(headDim);
  const lens = c.contexts.map((ctx) => ({ prefix: ctx - 1, query: 1 }));
  const sizes = layoutSeqs((x) => x, blockSize, lens);
  const variant0 = spec.variants[0];
  const plan = c.splitTokens
    ? { splitTokens: c.splitTokens, numSplits: Math.ceil(Math.max(...c.contexts) / c.splitTokens) }
    : planDecodeSplits(c.contexts, c, variant0);
  const cacheElems = sizes.numBlocks * blockSize * numKvHeads * headDim;
  const qElems = sizes.numTokens * numQHeads * headDim;
  const { table, maxBlocks } = packBlockTables(sizes.seqs, blockSize);
  const part = decodePartialsSize(c.contexts.length, numQHeads, headDim, plan.numSplits);
  const split = plan.numSplits > 1;
  return {
    label: `${c.label} (${plan.numSplits} x ${plan.splitTokens})`,
    params: {
      num_seqs: c.contexts.length,
      num_q_heads: numQHeads,
      num_kv_heads: numKvHeads,
      head_dim: headDim,
      block_size: blockSize,
      max_blocks: maxBlocks,
      split_tokens: plan.splitTokens,
      num_splits: plan.numSplits,
      scale,
    },
    inputs: (rng) => {
      const { seqs } = layoutSeqs((x) => rng.shuffle(x), blockSize, lens);
      return {
        q: rng.fillNormal(new Float32Array(qElems)),
        k_cache: rng.fillNormal(new Float32Array(cacheElems), c.kStd ?? 1.5),
        v_cache: rng.fillNormal(new Float32Array(cacheElems)),
        block_tables: packBlockTables(seqs, blockSize, maxBlocks).table,
        seq_info: packSeqInfo(seqs),
      };
    },
    outputs: { out: qElems, part_o: part.partO, part_lse: part.partLse },
    reference: (inp): Record<string, HostArray> => {
      const q = inp.q as Float32Array, k = inp.k_cache as Float32Array;
      const v = inp.v_cache as Float32Array;
      const seqs = unpackSeqs(
        inp.seq_info as Int32Array,
        inp.block_tables as Int32Array,
        maxBlocks,
      );
      if (!split) return { out: pagedAttentionRef(q, k, v, seqs, c, scale, sizes.numTokens) };
      const r = decodePartialsRef(q, k, v, seqs, c, scale, plan);
      return { part_o: r.partO, part_lse: r.partLse };
    },
    tolerance: (v) => v.subgroupMatrix ? c.tcTolerance ?? TC_TOLERANCE : FMA_TOLERANCE,
    variants: caseVariants({
      num_q_heads: numQHeads,
      num_kv_heads: numKvHeads,
      head_dim: headDim,
      block_size: blockSize,
      split_tokens: plan.splitTokens,
      num_splits: plan.numSplits,
    }),
    bytes: (v) =>
      kvBytes(sizes.seqs, c, v) + qElems * 4 + table.length * 4 +
      (split ? (part.partO + part.partLse) * 4 : qElems * 4),
    flops: attentionFlops(sizes.seqs, c),
  };
}

const QWEN3_30B = { numQHeads: 32, numKvHeads: 4, headDim: 128, blockSize: 16 } as const;
const MIXTRAL = { numQHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16 } as const;

export const cases: KernelCase<typeof params.fields>[] = [
  decodeCase({
    label: "1 seq ctx 7, bs=4 hd=16 q/kv=2/1",
    numQHeads: 2,
    numKvHeads: 1,
    headDim: 16,
    blockSize: 4,
    contexts: [7],
  }),
  decodeCase({
    label: "3 seqs ctx 1,9,23, bs=4 hd=32 q/kv=6/2",
    numQHeads: 6,
    numKvHeads: 2,
    headDim: 32,
    blockSize: 4,
    contexts: [1, 9, 23],
    splitTokens: 5,
  }),
  // One 300-key split at head_dim 64 (fewer columns than 32 lanes hold; the lanes forms'
  // partial chunk in a later pass of their key loop).
  decodeCase({
    label: "1 seq ctx 300, bs=16 hd=64 q/kv=4/1",
    numQHeads: 4,
    numKvHeads: 1,
    headDim: 64,
    blockSize: 16,
    contexts: [300],
    splitTokens: 300,
  }),
  decodeCase({
    label: "2 seqs ctx 37,150, bs=16 hd=128 q/kv=8/1",
    numQHeads: 8,
    numKvHeads: 1,
    headDim: 128,
    blockSize: 16,
    contexts: [37, 150],
    splitTokens: 48,
  }),
  decodeCase({
    label: "Qwen3-30B-A3B decode 64 x 1024",
    ...QWEN3_30B,
    contexts: Array(64).fill(1024),
  }),
  decodeCase({
    label: "Qwen3-30B-A3B decode 8 x 8192",
    ...QWEN3_30B,
    contexts: Array(8).fill(8192),
  }),
  decodeCase({ label: "Qwen3-30B-A3B decode 1 x 1024", ...QWEN3_30B, contexts: [1024] }),
  // Contexts off every key-step multiple over 32-slot blocks, splits of 100 keys (tiles that
  // cross blocks; the FMA forms only): the short sequences' later splits hold no keys
  // (EMPTY_SPLIT_LSE), 333's last split is partial.
  decodeCase({
    label: "Qwen3-30B-A3B decode ctx 1,17,100,333,1000, bs=32",
    ...QWEN3_30B,
    blockSize: 32,
    contexts: [1, 17, 100, 333, 1000],
    splitTokens: 100,
  }),
  // The same over splits of 96 keys (the direct tensor-core forms need 16-key multiples):
  // partial last tiles at 1, 17, 333 and 1000 keys, empty later splits.
  decodeCase({
    label: "Qwen3-30B-A3B decode ctx 1,17,100,333,1000, bs=32 splits of 96",
    ...QWEN3_30B,
    blockSize: 32,
    contexts: [1, 17, 100, 333, 1000],
    splitTokens: 96,
  }),
  // One split (no partials) over contexts off the step multiples, one just under the cap.
  decodeCase({
    label: "Qwen3-30B-A3B decode ctx 77,300,511 one split",
    ...QWEN3_30B,
    contexts: [77, 300, 511],
    splitTokens: 511,
  }),
  // Keys of std 8: scores of std 8, so later keys of a 512-key split pass the first ones' max
  // by more than 8 and rows rescale O (the tensor-core forms' lazy max). Peaked weights carry
  // the f16 rounding of q * scale further into the output.
  decodeCase({
    label: "Qwen3-30B-A3B decode ctx 1500,700, wide scores (rescales)",
    ...QWEN3_30B,
    contexts: [1500, 700],
    splitTokens: 512,
    kStd: 8,
    // (the emulation's worst element used 0.5 to 1 of a 5e-3 bound)
    tcTolerance: { atol: 1e-2, rtol: 1e-2 },
  }),
  // The model's plans for the several-subgroup forms: splits of up to 4096 keys (1376 at 64 x
  // 8192, 2736 at 8 x 131072), an empty split, a partial last step, 16 query heads a kv head,
  // rows that rescale.
  decodeCase({
    label: "16 heads a kv head, ctx 2000,3000, splits of 1024 (an empty one)",
    numQHeads: 32,
    numKvHeads: 2,
    headDim: 128,
    blockSize: 16,
    contexts: [2000, 3000],
    splitTokens: 1024,
  }),
  decodeCase({
    label: "Qwen3-30B-A3B decode ctx 1500,700,1376, splits of 688, blocks of 32, rescales",
    ...QWEN3_30B,
    blockSize: 32,
    contexts: [1500, 700, 1376],
    splitTokens: 688,
    kStd: 8,
    tcTolerance: { atol: 1e-2, rtol: 1e-2 },
  }),
  decodeCase({
    label: "Qwen3-30B-A3B decode ctx 3000,2900,100, splits of 2736, rescales",
    ...QWEN3_30B,
    contexts: [3000, 2900, 100],
    splitTokens: 2736,
    kStd: 8,
    tcTolerance: { atol: 1e-2, rtol: 1e-2 },
  }),
  decodeCase({
    label: "Mixtral-8x7B decode 32 x 2048",
    ...MIXTRAL,
    contexts: Array(32).fill(2048),
  }),
];
