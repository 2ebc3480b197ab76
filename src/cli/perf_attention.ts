/**
 * `deno task perf-attention`: paged decode attention of one layer alone at deep KV
 * (64 x 8192 and 8 x 131072 by default, which perf-decode cannot hold: 48 layers of KV do not
 * fit beside the weights), against the measured read bandwidth. The issue's target: the
 * kernel reads the KV bytes at >= 80% of the read roof.
 *
 * Per point (B sequences of context CTX, query length 1): one layer's paged K and V caches
 * [blocks, block_size, kv_heads, head_dim] drawn on the GPU by fill_random (no host upload),
 * each sequence on its own distinct blocks in a shuffled order (layoutSeqs), q random. Per
 * decode variant: planDecodeSplits (by default with the target a decode step of these sequences
 * takes in the model, decodeStepSplitChoice; --split-workgroups / --split-waves ask for others),
 * then the split kernel and, with more than one split, the
 * log-sum-exp merge, dispatched through KernelCall as GpuModel does. One untimed batch of
 * `--reps` repetitions, then `--reps` repetitions of (split kernel + merge) in one compute
 * pass timed by timestamp queries: GPU µs per repetition = pass time / reps; a second pass
 * times the split kernel alone (with one split there is no merge: the same figure). Without timestamp queries the time is host wall per
 * repetition (submit to onSubmittedWorkDone), and the output says so.
 *
 * Bytes are the KV bytes only: batch * ctx * kv_heads * head_dim * 2 (K and V) * sizeof(T);
 * q, the block tables and the split partials are not counted.
 *
 * Correctness guard (`--check`, on by default): before a variant is timed, the output of
 * sequence 0's first kv-head group (its G = q_heads / kv_heads query heads) is compared with
 * the CPU reference (attendRangeRef over every key of its context, f64), computed from
 * sequence 0's K/V blocks read back from the GPU (only those blocks: 134 MB each of K and V
 * at 131072 keys x 4 kv heads x 128 x f16) and once per point for all variants: 0.7 s of CPU
 * at 131072 keys x 8 heads x 128, so it runs at the full points, honestly, not on a smaller
 * stand-in. A variant off by more than 2^-10 of the group's largest |output| is marked FAIL
 * and not timed; the run then exits 1.
 *
 * With `--qk` (on by default) each form that has a twin taking qk_norm_rope_cache's work
 * (paged_attention_decode_qk: the model's decode steps run it) is timed again as VARIANT+qk,
 * after the point's other rows: its q normed and rotated from one random projection row a
 * sequence (no split-K partials), the new key written into the cache; its check uses the CPU's
 * query heads over the caches read back after it ran.
 *
 * A point whose K or V cache exceeds maxStorageBufferBindingSize or maxBufferSize, or that
 * the device cannot allocate, is skipped with its reason.
 *
 * ```sh
 * deno task perf-attention --points 64x8192,8x131072 --json attention.json
 * ```
 */
import process from "node:process";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { BufferUsage, describeGpu, type Gpu, MapMode, openGpu } from "../gpu/device.ts";
import { createStorage, readBuffer, uploadBuffer } from "../gpu/buffers.ts";
import { paced } from "../gpu/event_pacing.ts";
import { PassTimer, timeComputePass, warmComputePasses } from "../gpu/timestamps.ts";
import { KernelCall } from "../model/kernel_call.ts";
import { submitRandomFill } from "../model/random_fill.ts";
import { unsupportedReason, type Variant } from "../../kernels/kernel.ts";
import * as fillRandom from "../../kernels/fill_random.ts";
import * as decode from "../../kernels/paged_attention_decode.ts";
import type { DecodeSplitTarget } from "../../kernels/paged_attention_decode.ts";
import * as decodeReduce from "../../kernels/paged_attention_decode_reduce.ts";
import {
  attendRangeRef,
  type AttentionSeq,
  type AttentionShape,
  kvBytes,
  layoutSeqs,
  packBlockTables,
  packSeqInfo,
} from "../../kernels/paged_attention.ts";
import { f16BitsToF32, f32ToF16Bits, roundToF16InPlace } from "../util/f16.ts";
import * as decodeQk from "../../kernels/paged_attention_decode_qk.ts";
import { qkNormRopeCacheRef } from "../../kernels/qk_norm_rope_cache.ts";
import { ropeTable } from "../../kernels/rope.ts";
import { Rng } from "../util/rng.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";
import { intList, parseArgs, sizePairs, UsageError } from "./args.ts";
import { runCli } from "./run_cli.ts";
import { runRecord } from "./run_record.ts";
import { readRoof, roofLine } from "./bandwidth_roof.ts";
import { round3 } from "../util/sample_stats.ts";
import {
  DECODE_SPLIT_MIN_TOKENS,
  decodeSplitMinTokens,
  decodeStepSplitChoice,
  type DeepDecodeContext,
  deepDecodeVariant,
} from "../model/gpu_model.ts";

/**
 * Qwen3-30B-A3B's decode attention shape (the defaults; the tensor-core forms' split floor, which
 * decides which forms can run: each form's own floor plans its splits).
 */
const DEFAULT_SHAPE = {
  blockSize: 16,
  numQHeads: 32,
  numKvHeads: 4,
  minSplitTokens: DECODE_SPLIT_MIN_TOKENS,
} as const;

const SPEC = {
  points: {
    type: "list",
    default: ["64x8192", "8x131072"],
    help: "BATCHxCTX points (every sequence has context CTX)",
  },
  variant: {
    type: "list",
    help: "paged_attention_decode variants (default: those of DTYPE-tiled, DTYPE-lanes32, " +
      "DTYPE-lanes8, DTYPE this adapter runs)",
  },
  dtype: { type: "string", values: ["f16", "f32"], default: "f16", help: "K/V storage type" },
  reps: { type: "number", default: 20, integer: true, min: 1, help: "timed repetitions" },
  warmupMs: {
    type: "number",
    default: 250,
    min: 0,
    help: "ms of untimed passes right before each row's timed ones (clocks up after the idle " +
      "check: without them a sweep's first rows on the H200 read up to 4x slow)",
  },
  json: { type: "string", help: "write the points as JSON" },
  bandwidthGbps: {
    type: "number",
    min: 1,
    help: "read bandwidth of the roof (default: measured by read_bandwidth)",
  },
  blockSize: {
    type: "number",
    default: DEFAULT_SHAPE.blockSize,
    integer: true,
    min: 1,
    help: "KV block size",
  },
  qHeads: {
    type: "number",
    default: DEFAULT_SHAPE.numQHeads,
    integer: true,
    min: 1,
    help: "query heads",
  },
  kvHeads: {
    type: "number",
    default: DEFAULT_SHAPE.numKvHeads,
    integer: true,
    min: 1,
    help: "KV heads",
  },
  headDim: { type: "number", default: 128, integer: true, min: 4, help: "head dimension" },
  splitWorkgroups: {
    type: "list",
    help: "split plans: about this many (split, seq, kv head) workgroups (planDecodeSplits; " +
      "several: one row each, with every --split-min-tokens) (default, without --split-waves: " +
      "the model's plan for each form, as a decode step of these sequences takes it)",
  },
  splitWaves: {
    type: "list",
    help: "split plans: the fewest whole waves of this many workgroups whose splits fit the " +
      "variant (the model's plans for the tensor-core forms: 1536, or 768 where their splits " +
      "reach 256 keys), one row each",
  },
  splitMinTokens: {
    type: "list",
    help: "split plans: at least these keys a split (default: each form's own, as in the " +
      "model: 32 on the tiled forms, 64 on the others)",
  },
  check: {
    type: "boolean",
    default: true,
    help: "compare sequence 0's first kv-head group with the CPU reference before timing " +
      "(--check=false to skip)",
  },
  qk: {
    type: "boolean",
    default: true,
    help: "also time each form's twin that takes qk_norm_rope_cache's work inside " +
      "(paged_attention_decode_qk, as the model's decode steps run it; a row VARIANT+qk after " +
      "the point's other rows: q normed and rotated from one projection row, the new key " +
      "written; --qk=false to leave them out)",
  },
} as const;

/**
 * Below this many K and V bytes a point may stay in the GPU's last-level cache between
 * repetitions (the H200's L2 is 50 MB; twice over, with room for larger caches): its rows
 * are marked.
 */
export const CACHE_SUSPECT_BYTES = 128 * 2 ** 20;

/** The issue's target: this share of the read roof on the KV bytes. */
export const TARGET_ROOF_SHARE = 0.8;

/** Largest error of a checked output, relative to the largest |reference| value (f16 ulp). */
export const CHECK_TOLERANCE = 2 ** -10;

/** One benchmark point: `batch` sequences, each of context `ctx`, one query token each. */
export interface AttentionPoint {
  readonly batch: number;
  readonly ctx: number;
}

/** Parses `BATCHxCTX` points ("64x8192"); a bad one is a UsageError naming it. */
export function parsePoints(values: readonly string[]): AttentionPoint[] {
  return sizePairs("--points", values, "BATCHxCTX").map(([batch, ctx]) => ({ batch, ctx }));
}

/** A variant not run, and why. */
export interface VariantSkip {
  readonly variant: string;
  readonly reason: string;
}

/**
 * The decode variants to run: `names`, or by default DTYPE-tiled, the tensor-core form the
 * model takes for deep steps of `shape` here (deepDecodeVariant), DTYPE-lanes32, DTYPE-lanes8
 * and DTYPE; those this adapter cannot run come back in `skipped`. An unknown name, or one of
 * another storage type than `dtype`, is a UsageError.
 */
export function selectVariants(
  gpu: Gpu,
  dtype: "f16" | "f32",
  names?: readonly string[],
  shape: Omit<DeepDecodeContext, "dtype"> = DEFAULT_SHAPE,
): { run: Variant[]; skipped: VariantSkip[] } {
  const deep = deepDecodeVariant(gpu, { ...shape, dtype });
  const wanted = names ??
    [`${dtype}-tiled`, ...(deep ? [deep] : []), `${dtype}-lanes32`, `${dtype}-lanes8`, dtype];
  const run: Variant[] = [], skipped: VariantSkip[] = [];
  for (const name of wanted) {
    const v = decode.spec.variants.find((x) => x.name === name);
    if (!v) {
      throw new UsageError(
        `--variant: '${name}' is not a paged_attention_decode variant (known: ${
          decode.spec.variants.map((x) => x.name).join(", ")
        })`,
      );
    }
    if (v.dtype !== dtype) {
      throw new UsageError(`--variant: ${name} stores ${v.dtype} K/V, --dtype is ${dtype}`);
    }
    const reason = unsupportedReason(gpu, v);
    if (reason) skipped.push({ variant: name, reason });
    else run.push(v);
  }
  return { run, skipped };
}

/** What benchAttention measures. */
export interface PerfAttentionOptions {
  readonly points: readonly AttentionPoint[];
  /** Variants of paged_attention_decode, all of storage type `dtype`, all supported. */
  readonly variants: readonly Variant[];
  readonly dtype: "f16" | "f32";
  readonly reps: number;
  /** ms of untimed passes right before each row's timed ones (default 0: none). */
  readonly warmupMs?: number;
  readonly blockSize: number;
  readonly numQHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Compare with the CPU reference before timing. */
  readonly check: boolean;
  /** Also time the forms' paged_attention_decode_qk twins (a `+qk` row each; default false). */
  readonly qk?: boolean;
  /** planDecodeSplits' (target, minSplitTokens) pairs: one row each (default one). */
  readonly splitPlans?: readonly SplitPlanInputs[];
  /** The read roof, bytes/s (null: no roof share). */
  readonly bytesPerSecond: number | null;
}

/**
 * What a split plan is made from: planDecodeSplits' target ("model": the one a decode step of
 * the point's sequences takes in the model, decodeStepSplitChoice) and least keys a split.
 */
export interface SplitPlanInputs {
  readonly target: DecodeSplitTarget | "model";
  /** (undefined: the form's own, decodeSplitMinTokens) */
  readonly minTokens?: number;
}

/** One (point, variant) measured, or failed by the check (then no time). */
export interface AttentionRow {
  readonly batch: number;
  readonly ctx: number;
  readonly variant: string;
  readonly split_tokens: number;
  readonly num_splits: number;
  /**
   * The split plan's inputs (planDecodeSplits' target: about this many workgroups, or whole
   * waves of `split_wave` workgroups, the other null; and minSplitTokens), and whether it is
   * the model's plan (`split_rule` "model") or one asked for ("asked").
   */
  readonly split_rule: "model" | "asked";
  readonly split_workgroups: number | null;
  readonly split_wave: number | null;
  readonly split_min_tokens: number;
  /**
   * The K and V bytes are under CACHE_SUSPECT_BYTES: back-to-back repetitions may read them
   * from the GPU's cache, and GB/s may exceed the HBM roof (a real step's 48 layers would not).
   */
  readonly cache_suspect: boolean;
  /** GPU µs per repetition of split kernel + merge (null when the check failed). */
  readonly gpu_us: number | null;
  /** GPU µs per repetition of the split kernel alone. */
  readonly split_us: number | null;
  /** K and V bytes of every context key. */
  readonly kv_bytes: number;
  readonly gbps: number | null;
  /** gbps over the read roof. */
  readonly roof_share: number | null;
  /** "ok", "fail" or "off" (--check=false). */
  readonly check: "ok" | "fail" | "off";
  /** Largest error relative to the largest |reference| (null when not checked). */
  readonly check_error: number | null;
}

/** A point or (point, variant) not run, and why. */
export interface PointSkip {
  readonly batch: number;
  readonly ctx: number;
  readonly variant: string | null;
  readonly reason: string;
}

/** The rows, the skips, and how time was taken. */
export interface PerfAttentionResult {
  readonly rows: AttentionRow[];
  readonly skipped: PointSkip[];
  /** "timestamps": GPU time from timestamp queries; "wall": host time per repetition. */
  readonly timing: "timestamps" | "wall";
}

/**
 * Times every variant at every point (see the module doc); `log` gets one line per row and
 * per skip.
 */
export async function benchAttention(
  gpu: Gpu,
  o: PerfAttentionOptions,
  log: (line: string) => void = console.log,
): Promise<PerfAttentionResult> {
  for (const v of o.variants) {
    if (v.dtype !== o.dtype) throw new Error(`benchAttention: ${v.name} is not ${o.dtype}`);
  }
  const rows: AttentionRow[] = [], skipped: PointSkip[] = [];
  if (o.variants.length === 0) {
    return { rows, skipped, timing: gpu.timestamps ? "timestamps" : "wall" };
  }
  const fill = await KernelCall.create(gpu, fillRandom.spec, [o.dtype]);
  const timer = new PassTimer(gpu, 1);
  try {
    for (const point of o.points) {
      const skip = (variant: string | null, reason: string) => {
        skipped.push({ ...point, variant, reason });
        log(`skip ${point.batch} x ${point.ctx}${variant ? " " + variant : ""}: ${reason}`);
      };
      const tooBig = cacheLimitReason(gpu, o, point);
      if (tooBig) {
        skip(null, tooBig);
        continue;
      }
      const state = await PointState.create(gpu, o, point, fill);
      if (typeof state === "string") {
        skip(null, state);
        continue;
      }
      try {
        // the twins last: they write each sequence's last key, which the plain forms' cached
        // reference read before them
        const twins = o.qk ? o.variants.filter((v) => decodeQk.qkTwinOf(v.name) !== null) : [];
        const runs = [
          ...o.variants.map((v) => ({ variant: v, twin: false })),
          ...twins.map((v) => ({ variant: v, twin: true })),
        ];
        for (const { variant, twin } of runs) {
          const name = `${variant.name}${twin ? "+qk" : ""}`;
          for (const split of o.splitPlans ?? [DEFAULT_SPLIT]) {
            const r = await benchVariant(gpu, o, state, variant, timer, split, twin);
            if (typeof r === "string") {
              skip(name, r);
              continue;
            }
            rows.push(r);
            log(describeRow(r));
          }
        }
      } finally {
        state.destroy();
      }
    }
  } finally {
    fill.destroy();
    timer.destroy();
  }
  return { rows, skipped, timing: timer.enabled ? "timestamps" : "wall" };
}

/** The split plan by default: the model's. */
const DEFAULT_SPLIT: SplitPlanInputs = { target: "model" };

/** Why a point's caches cannot be bound, or null. */
function cacheLimitReason(gpu: Gpu, o: PerfAttentionOptions, p: AttentionPoint): string | null {
  const bytes = cacheBlocks(o, p) * o.blockSize * o.numKvHeads * o.headDim * dtypeBytes(o.dtype);
  const binding = gpu.limits.maxStorageBufferBindingSize;
  const buffer = gpu.limits.maxBufferSize;
  if (bytes > binding) {
    return `the K and V caches need ${bytes} bytes each, above maxStorageBufferBindingSize ${binding}`;
  }
  if (bytes > buffer) {
    return `the K and V caches need ${bytes} bytes each, above maxBufferSize ${buffer}`;
  }
  return null;
}

/** Blocks of a point's caches (layoutSeqs: every sequence's own blocks, and 3 spare). */
function cacheBlocks(o: PerfAttentionOptions, p: AttentionPoint): number {
  return p.batch * Math.ceil(p.ctx / o.blockSize) + 3;
}

function dtypeBytes(dtype: "f16" | "f32"): number {
  return dtype === "f16" ? 2 : 4;
}

/** What the twin rows of a point bind beside the caches, and sequence 0's query heads. */
interface QkInputs {
  readonly buffers: {
    readonly qkv: GPUBuffer;
    readonly qNorm: GPUBuffer;
    readonly kNorm: GPUBuffer;
    readonly cosSin: GPUBuffer;
  };
  readonly q0: Float32Array;
}

/** One point's buffers (shared by its variants) and its lazily computed reference. */
class PointState {
  private reference: Float32Array | null = null;
  private qk: QkInputs | null = null;

  private constructor(
    readonly point: AttentionPoint,
    readonly seqs: readonly AttentionSeq[],
    readonly maxBlocks: number,
    readonly q: Float32Array,
    readonly buffers: {
      q: GPUBuffer;
      k: GPUBuffer;
      v: GPUBuffer;
      blockTables: GPUBuffer;
      seqInfo: GPUBuffer;
      out: GPUBuffer;
      /** Bound as the merge's out16, which it does not write (write_f16 0). */
      placeholder: GPUBuffer;
    },
  ) {}

  /** Allocates and fills a point's buffers; a string says why it could not. */
  static async create(
    gpu: Gpu,
    o: PerfAttentionOptions,
    point: AttentionPoint,
    fill: KernelCall<typeof fillRandom.spec.params.fields>,
  ): Promise<PointState | string> {
    const { batch, ctx } = point;
    const rng = Rng.fromSeed(`perf-attention:${batch}x${ctx}`);
    const lens = Array.from({ length: batch }, () => ({ prefix: ctx - 1, query: 1 }));
    // every sequence on its own blocks, in a shuffled order: really paged
    const layout = layoutSeqs((x) => rng.shuffle(x), o.blockSize, lens);
    const { table, maxBlocks } = packBlockTables(layout.seqs, o.blockSize);
    const elements = layout.numBlocks * o.blockSize * o.numKvHeads * o.headDim;
    const d = gpu.device;
    const q = rng.fillNormal(new Float32Array(batch * o.numQHeads * o.headDim));
    d.pushErrorScope("out-of-memory");
    const buffers = {
      k: createStorage(d, "perf-attention.k_cache", elements * dtypeBytes(o.dtype)),
      v: createStorage(d, "perf-attention.v_cache", elements * dtypeBytes(o.dtype)),
      q: uploadBuffer(d, "perf-attention.q", q),
      blockTables: uploadBuffer(d, "perf-attention.block_tables", table),
      seqInfo: uploadBuffer(d, "perf-attention.seq_info", packSeqInfo(layout.seqs)),
      out: createStorage(d, "perf-attention.out", q.byteLength),
      placeholder: createStorage(d, "perf-attention.placeholder", 16),
    };
    const oom = await d.popErrorScope();
    const state = new PointState(point, layout.seqs, maxBlocks, q, buffers);
    if (oom) {
      state.destroy();
      return `the device could not allocate the caches: ${oom.message}`;
    }
    // K wider than V, as the decode cases draw them: scores of a few units, a real softmax
    await fillBuffer(gpu, fill, o.dtype, buffers.k, elements, 1, 1.5);
    await fillBuffer(gpu, fill, o.dtype, buffers.v, elements, 2, 1);
    return state;
  }

  /**
   * The twins' inputs (made once a point): one projection row a sequence (f32, normal), the
   * norm weights (T), the RoPE angles of position ctx - 1 as a one-row table (the kernel clamps
   * the position into it), and sequence 0's query heads as the CPU makes them.
   */
  qkInputs(gpu: Gpu, o: PerfAttentionOptions): QkInputs {
    if (this.qk) return this.qk;
    const { numQHeads: nq, numKvHeads: nkv, headDim: hd } = o;
    const rng = Rng.fromSeed(`perf-attention:qk:${this.point.batch}x${this.point.ctx}`);
    const width = (nq + 2 * nkv) * hd;
    const qkv = rng.fillNormal(new Float32Array(this.point.batch * width), 2);
    // norm weights as stored (rounded to f16 where the caches are)
    const norm = () => {
      const w = rng.fillUniform(new Float32Array(hd), 0.5, 1.5);
      return o.dtype === "f16" ? roundToF16InPlace(w) : w;
    };
    const qNorm = norm(), kNorm = norm();
    const pos = this.point.ctx - 1;
    const cosSin = ropeTable(pos + 1, hd, 1e6).slice(pos * hd);
    const stored = (w: Float32Array) => (o.dtype === "f16" ? f32ToF16Bits(w) : w);
    const d = gpu.device;
    const buffers = {
      qkv: uploadBuffer(d, "perf-attention.qkv", qkv),
      qNorm: uploadBuffer(d, "perf-attention.q_norm", stored(qNorm)),
      kNorm: uploadBuffer(d, "perf-attention.k_norm", stored(kNorm)),
      cosSin: uploadBuffer(d, "perf-attention.cos_sin", cosSin),
    };
    const shape = { numQHeads: nq, numKvHeads: nkv, headDim: hd };
    const none = new Float32Array(0);
    const q0 = qkNormRopeCacheRef(
      qkv.subarray(0, width),
      qNorm,
      kNorm,
      cosSin,
      Int32Array.of(0),
      Int32Array.of(-1),
      none,
      none,
      shape,
      1e-6,
    ).q;
    this.qk = { buffers, q0 };
    return this.qk;
  }

  /**
   * The reference output of sequence 0's first kv-head group, [G, head_dim], from its
   * blocks read back (computed once for every variant); with `q0` (sequence 0's query heads, as
   * a twin makes them) from blocks read back now, not kept.
   */
  async referenceOfGroup0(
    gpu: Gpu,
    o: PerfAttentionOptions,
    q0?: Float32Array,
  ): Promise<Float32Array> {
    if (this.reference && !q0) return this.reference;
    const seq = this.seqs[0];
    const blocks = Array.from(seq.blockTable).slice(0, Math.ceil(seq.contextLen / o.blockSize));
    const blockElems = o.blockSize * o.numKvHeads * o.headDim;
    const k0 = head0Rows(await readBlocks(gpu, this.buffers.k, blocks, blockElems, o.dtype), o);
    const v0 = head0Rows(await readBlocks(gpu, this.buffers.v, blocks, blockElems, o.dtype), o);
    const group = o.numQHeads / o.numKvHeads;
    // the group's heads alone, over compacted caches of kv head 0: the same math, less memory
    const shape: AttentionShape = {
      numQHeads: group,
      numKvHeads: 1,
      headDim: o.headDim,
      blockSize: o.blockSize,
    };
    const compact: AttentionSeq = {
      queryStart: 0,
      queryLen: 1,
      contextLen: seq.contextLen,
      blockTable: Int32Array.from(blocks.keys()),
    };
    const query = q0 ?? this.q.subarray(seq.queryStart * o.numQHeads * o.headDim);
    const ref = new Float32Array(group * o.headDim);
    const scale = 1 / Math.sqrt(o.headDim);
    for (let h = 0; h < group; h++) {
      const r = attendRangeRef(query, 0, h, k0, v0, compact, shape, scale, 0, seq.contextLen);
      ref.set(r.out, h * o.headDim);
    }
    if (!q0) this.reference = ref;
    return ref;
  }

  destroy(): void {
    for (const b of Object.values(this.buffers)) b.destroy();
    for (const b of Object.values(this.qk?.buffers ?? {})) b.destroy();
  }
}

/** fill_random over all `elements` of `buffer`, waited for. */
async function fillBuffer(
  gpu: Gpu,
  fill: KernelCall<typeof fillRandom.spec.params.fields>,
  dtype: "f16" | "f32",
  buffer: GPUBuffer,
  elements: number,
  seed: number,
  scale: number,
): Promise<void> {
  submitRandomFill(gpu, fill, dtype, buffer, { offset: 0, count: elements, seed, base: 0, scale });
  await paced(gpu.device.queue.onSubmittedWorkDone());
}

/** The given blocks of a cache, in this order, copied into host memory. */
async function readBlocks(
  gpu: Gpu,
  cache: GPUBuffer,
  blocks: readonly number[],
  blockElems: number,
  dtype: "f16" | "f32",
): Promise<Float32Array | Uint16Array> {
  const blockBytes = blockElems * dtypeBytes(dtype);
  const d = gpu.device;
  const staging = d.createBuffer({
    label: "perf-attention.readback",
    size: blocks.length * blockBytes,
    usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
  });
  const enc = d.createCommandEncoder();
  blocks.forEach((b, i) =>
    enc.copyBufferToBuffer(cache, b * blockBytes, staging, i * blockBytes, blockBytes)
  );
  d.queue.submit([enc.finish()]);
  await paced(staging.mapAsync(MapMode.READ));
  const bytes = staging.getMappedRange().slice(0);
  staging.unmap();
  staging.destroy();
  return dtype === "f16" ? new Uint16Array(bytes) : new Float32Array(bytes);
}

/** Rows of kv head 0 out of blocks [n, block_size, kv_heads, head_dim], as f32 [rows, head_dim]. */
function head0Rows(raw: Float32Array | Uint16Array, o: PerfAttentionOptions): Float32Array {
  const rows = raw.length / (o.numKvHeads * o.headDim);
  const picked = raw instanceof Uint16Array
    ? new Uint16Array(rows * o.headDim)
    : new Float32Array(rows * o.headDim);
  for (let r = 0; r < rows; r++) {
    const from = r * o.numKvHeads * o.headDim;
    picked.set(raw.subarray(from, from + o.headDim), r * o.headDim);
  }
  return picked instanceof Uint16Array ? f16BitsToF32(picked) : picked;
}

/**
 * `got` against `ref`: the largest |got - ref| over the largest |ref| (a NaN counts as
 * infinitely wrong); ok within CHECK_TOLERANCE.
 */
export function compareToReference(
  got: Float32Array,
  ref: Float32Array,
): { ok: boolean; error: number } {
  if (got.length !== ref.length) throw new Error(`compare: ${got.length} vs ${ref.length} values`);
  let maxRef = 0, maxErr = 0;
  for (let i = 0; i < ref.length; i++) {
    maxRef = Math.max(maxRef, Math.abs(ref[i]));
    const e = Math.abs(got[i] - ref[i]);
    maxErr = Number.isNaN(e) ? Infinity : Math.max(maxErr, e);
  }
  const error = maxRef > 0 ? maxErr / maxRef : maxErr;
  return { ok: error <= CHECK_TOLERANCE, error };
}

/** One variant at one point: plan, warm-up, check, time. A string says why it was skipped. */
async function benchVariant(
  gpu: Gpu,
  o: PerfAttentionOptions,
  state: PointState,
  variant: Variant,
  timer: PassTimer,
  splitPlan: SplitPlanInputs = DEFAULT_SPLIT,
  twin = false,
): Promise<AttentionRow | string> {
  const { batch, ctx } = state.point;
  const { numQHeads: nq, numKvHeads: nkv, headDim: hd } = o;
  let plan: decode.DecodeSplitPlan;
  let target: DecodeSplitTarget;
  try {
    const lens = state.seqs.map((s) => s.contextLen);
    const shape = { numQHeads: nq, numKvHeads: nkv };
    ({ target, plan } = splitPlan.target === "model"
      ? decodeStepSplitChoice(lens, shape, variant, { minTokens: splitPlan.minTokens })
      : {
        target: splitPlan.target,
        plan: decode.planDecodeSplits(
          lens,
          shape,
          variant,
          splitPlan.target,
          splitPlan.minTokens ?? decodeSplitMinTokens(variant),
        ),
      });
  } catch (err) {
    return (err as Error).message;
  }
  const splits = plan.numSplits;
  const part = decode.decodePartialsSize(batch, nq, hd, splits);
  const partO = createStorage(gpu.device, "perf-attention.part_o", part.partO * 4);
  const partLse = createStorage(gpu.device, "perf-attention.part_lse", part.partLse * 4);
  // a twin: the form with qk_norm_rope_cache's work inside (one projection row, no partials)
  const split =
    (twin
      ? await KernelCall.create(gpu, decodeQk.spec, [variant.name])
      : await KernelCall.create(gpu, decode.spec, [variant.name])) as KernelCall<
        typeof decodeQk.spec.params.fields
      >;
  const merge = await KernelCall.create(gpu, decodeReduce.spec, ["f32", "f32-wg256"]);
  const qk = twin ? state.qkInputs(gpu, o) : null;
  try {
    split.setParams({
      num_seqs: batch,
      num_q_heads: nq,
      num_kv_heads: nkv,
      head_dim: hd,
      block_size: o.blockSize,
      max_blocks: state.maxBlocks,
      split_tokens: plan.splitTokens,
      num_splits: splits,
      scale: 1 / Math.sqrt(hd),
      // (the twin's fields; past the plain form's params, not packed there)
      qk_norm: 1,
      eps: 1e-6,
      max_positions: 1,
      qkv_splits: 1,
      qkv_split_stride: 0,
    });
    try {
      split.grid(variant.name);
    } catch (err) {
      return (err as Error).message;
    }
    if (splits > 1) {
      merge.setParams({
        num_seqs: batch,
        num_q_heads: nq,
        head_dim: hd,
        split_tokens: plan.splitTokens,
        num_splits: splits,
        write_f16: 0,
      });
    }
    const b = state.buffers;
    // the bindings, made once (every repetition binds the same buffers)
    const common = {
      k_cache: b.k,
      v_cache: b.v,
      block_tables: b.blockTables,
      seq_info: b.seqInfo,
      out: b.out,
      part_o: partO,
      part_lse: partLse,
    };
    const splitBindings = qk
      ? {
        ...common,
        qkv: qk.buffers.qkv,
        q_norm: qk.buffers.qNorm,
        k_norm: qk.buffers.kNorm,
        cos_sin: qk.buffers.cosSin,
      }
      : { ...common, q: b.q };
    const mergeBindings = {
      seq_info: b.seqInfo,
      part_o: partO,
      part_lse: partLse,
      out: b.out,
      // not written (write_f16 0); WebGPU forbids binding out twice where either is writable
      out16: b.placeholder,
    };
    const mergeVariant = decodeReduce.reduceVariant(splits);
    const encode = (pass: GPUComputePassEncoder, withMerge: boolean) => {
      for (let i = 0; i < o.reps; i++) {
        split.dispatch(pass, variant.name, "point", splitBindings);
        if (withMerge && splits > 1) merge.dispatch(pass, mergeVariant, "point", mergeBindings);
      }
    };
    const clear = gpu.device.createCommandEncoder();
    clear.clearBuffer(b.out);
    gpu.device.queue.submit([clear.finish()]);
    await timeComputePass(gpu, null, "warm-up", (pass) => encode(pass, true));

    let check: AttentionRow["check"] = "off", checkError: number | null = null;
    if (o.check) {
      // (a twin's: its own query heads over the caches with the new keys it wrote)
      const ref = await state.referenceOfGroup0(gpu, o, qk?.q0);
      const q0 = state.seqs[0].queryStart * nq * hd;
      const got = new Float32Array(await readBuffer(gpu.device, b.out, ref.byteLength, q0 * 4));
      const c = compareToReference(got, ref);
      check = c.ok ? "ok" : "fail";
      checkError = c.error;
    }
    const base = {
      batch,
      ctx,
      variant: `${variant.name}${twin ? "+qk" : ""}`,
      split_tokens: plan.splitTokens,
      num_splits: splits,
      split_workgroups: typeof target === "number" ? target : null,
      split_wave: typeof target === "number" ? null : target.wave,
      split_min_tokens: splitPlan.minTokens ?? decodeSplitMinTokens(variant),
      split_rule: (splitPlan.target === "model" ? "model" : "asked") as AttentionRow["split_rule"],
      kv_bytes: kvBytes(state.seqs, o, variant),
      cache_suspect: kvBytes(state.seqs, o, variant) < CACHE_SUSPECT_BYTES,
      check,
      check_error: checkError,
    };
    if (check === "fail") {
      return { ...base, gpu_us: null, split_us: null, gbps: null, roof_share: null };
    }
    if (o.warmupMs) {
      await warmComputePasses(gpu, "attention warm-up", (pass) => encode(pass, true), o.warmupMs);
    }
    const gpuUs = (await timeComputePass(gpu, timer, "attention", (pass) => encode(pass, true))) /
      o.reps;
    const splitUs = splits > 1
      ? (await timeComputePass(gpu, timer, "split", (pass) => encode(pass, false))) / o.reps
      : gpuUs;
    const gbps = base.kv_bytes / (gpuUs * 1e-6) / 1e9;
    return {
      ...base,
      gpu_us: gpuUs,
      split_us: splitUs,
      gbps,
      roof_share: o.bytesPerSecond ? (gbps * 1e9) / o.bytesPerSecond : null,
    };
  } finally {
    split.destroy();
    merge.destroy();
    partO.destroy();
    partLse.destroy();
  }
}

function describeRow(r: AttentionRow): string {
  const head = `${r.batch} x ${r.ctx} ${r.variant}: ${r.num_splits} split${
    r.num_splits > 1 ? "s" : ""
  } of ${r.split_tokens} keys (${planText(r)})`;
  const check = r.check === "off" ? "" : `, check ${r.check} (${r.check_error!.toExponential(1)})`;
  if (r.gpu_us === null) return `${head}${check}: not timed`;
  return `${head}, ${r.gpu_us.toFixed(1)} µs, ${gbpsText(r.gbps!)} GB/s${
    r.roof_share === null ? "" : ` (${(r.roof_share * 100).toFixed(1)}% of the roof)`
  }${check}`;
}

/** GB/s with three significant digits below 100 (the software driver's figures). */
function gbpsText(gbps: number): string {
  return gbps >= 100 ? gbps.toFixed(0) : gbps.toPrecision(3);
}

/** A row's split plan inputs in words: "model, waves of 768", "~1024 wg". */
function planText(r: AttentionRow): string {
  const inputs = r.split_wave !== null ? `waves of ${r.split_wave}` : `~${r.split_workgroups} wg`;
  return r.split_rule === "model" ? `model, ${inputs}` : inputs;
}

/** The table: one row per (point, variant). */
export function formatRows(rows: readonly AttentionRow[]): string {
  const num = (x: number | null, digits: number) => (x === null ? "-" : x.toFixed(digits));
  return formatTable(
    [
      "batch",
      "ctx",
      "variant",
      "plan",
      "splits",
      "GPU µs",
      "split µs",
      "KV bytes",
      "GB/s",
      "% roof",
      "check",
    ],
    rows.map((r) => [
      String(r.batch),
      String(r.ctx),
      r.variant,
      planText(r),
      `${r.split_tokens}x${r.num_splits}`,
      num(r.gpu_us, 1),
      num(r.split_us, 1),
      String(r.kv_bytes),
      r.gbps === null ? "-" : gbpsText(r.gbps),
      r.roof_share === null
        ? "-"
        : (r.roof_share * 100).toFixed(1) + "%" + (r.cache_suspect ? " (cache?)" : ""),
      r.check === "off" ? "off" : `${r.check} ${r.check_error!.toExponential(1)}`,
    ]),
  );
}

/** The task: parse, open the GPU, measure the roof, bench, print, write JSON. */
export async function main(argv: readonly string[]): Promise<number> {
  const o = parseArgs(
    "perf-attention",
    "Paged decode attention of one layer at deep KV vs the measured read bandwidth.",
    SPEC,
    argv,
  );
  const points = parsePoints(o.points);
  const dtype = o.dtype as "f16" | "f32";
  if (o.qHeads % o.kvHeads !== 0) {
    throw new UsageError(`--q-heads ${o.qHeads} is not a multiple of --kv-heads ${o.kvHeads}`);
  }
  if (o.headDim % 4 !== 0) throw new UsageError(`--head-dim ${o.headDim} is not a multiple of 4`);
  const waves = o.splitWaves ? intList("--split-waves", o.splitWaves) : [];
  const asked: DecodeSplitTarget[] = [
    ...(o.splitWorkgroups ? intList("--split-workgroups", o.splitWorkgroups) : []),
    ...waves.map((wave) => ({ wave })),
  ];
  const targets: SplitPlanInputs["target"][] = asked.length ? asked : ["model"];
  const minTokens = o.splitMinTokens ? intList("--split-min-tokens", o.splitMinTokens) : [];
  const splitPlans = targets.flatMap((target) =>
    (minTokens.length ? minTokens : [undefined]).map((m) => ({ target, minTokens: m }))
  );
  const gpu = await openGpu();
  console.log(describeGpu(gpu));
  const variants = selectVariants(gpu, dtype, o.variant, {
    numQHeads: o.qHeads,
    numKvHeads: o.kvHeads,
    blockSize: o.blockSize,
    minSplitTokens: minTokens.length ? Math.min(...minTokens) : DECODE_SPLIT_MIN_TOKENS,
  });
  for (const s of variants.skipped) console.log(`skip variant ${s.variant}: ${s.reason}`);
  const bw = await readRoof(gpu, o.bandwidthGbps);
  console.log(roofLine(bw));
  if (!gpu.timestamps) {
    console.log("no timestamp queries: times are host wall per repetition, not GPU time");
  }
  const result = await benchAttention(gpu, {
    points,
    variants: variants.run,
    dtype,
    reps: o.reps,
    warmupMs: o.warmupMs,
    blockSize: o.blockSize,
    numQHeads: o.qHeads,
    numKvHeads: o.kvHeads,
    headDim: o.headDim,
    check: o.check,
    qk: o.qk,
    bytesPerSecond: bw?.bytesPerSecond ?? null,
    splitPlans,
  });
  console.log("");
  console.log(
    result.timing === "timestamps"
      ? `GPU µs: one timed pass of ${o.reps} repetitions (split kernel + merge) / ${o.reps}; ` +
        "split µs: the split kernel alone"
      : `wall µs per repetition (submit to done) over ${o.reps} repetitions, not GPU time`,
  );
  console.log(formatRows(result.rows));
  console.log(`target: >= ${TARGET_ROOF_SHARE * 100}% of read bandwidth`);
  if (result.rows.some((r) => r.cache_suspect)) {
    console.log(
      `(cache?): under ${
        CACHE_SUSPECT_BYTES / 2 ** 20
      } MiB of K and V, repetitions may read them from cache, not HBM`,
    );
  }
  if (result.rows.length === 0) console.log("no point was measured (see the skips above)");
  if (o.json) {
    writeJsonAtomic(userPath(o.json), {
      ...runRecord(gpu),
      bandwidth_gbps: bw ? round3(bw.bytesPerSecond / 1e9) : null,
      timing: result.timing,
      dtype,
      shape: {
        q_heads: o.qHeads,
        kv_heads: o.kvHeads,
        head_dim: o.headDim,
        block_size: o.blockSize,
      },
      reps: o.reps,
      warmup_ms: o.warmupMs,
      points: result.rows.map((r) => ({
        ...r,
        gpu_us: roundOrNull(r.gpu_us),
        split_us: roundOrNull(r.split_us),
        gbps: roundOrNull(r.gbps),
        roof_share: roundOrNull(r.roof_share),
      })),
      skipped: [
        ...variants.skipped.map((s) => ({ ...s, batch: null, ctx: null })),
        ...result.skipped,
      ],
    });
  }
  gpu.destroy();
  return result.rows.some((r) => r.check === "fail") ? 1 : 0;
}

function roundOrNull(x: number | null): number | null {
  return x === null ? null : round3(x);
}

// Deno sets import.meta.main; Node 20 (the node-build bundle) does not: compare paths there.
const isEntry = import.meta.main ??
  (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url));
if (isEntry) await runCli(() => main(process.argv.slice(2)));
