/**
 * The transformer on the GPU: turns a StepBatch into sampled tokens (and logits on
 * request) with one command buffer per step and no host read-back inside the step. It
 * knows nothing of requests or scheduling.
 *
 * One step, top to bottom (T tokens, S sequences, R sampled rows):
 * ```
 * kv_block_copy (CoW forks)         every layer's K and V, before anything writes them
 * embedding                         token_ids | previous step's sampled ids -> x [T, H]
 * per layer:
 *   rmsnorm                         x -> h
 *   linear qkv                      h -> qkv [T, (nq + 2 nkv) hd]
 *   qk_norm_rope_cache              qkv -> q [T, nq hd]; K/V written at slot_mapping
 *   paged_attention | _decode       q, paged K/V -> attn [T, nq hd]
 *   linear o (+=)                   x += attn o^T
 *   rmsnorm                         x -> h
 *   moe: linear router, MoeBlock    x += experts(h)     dense: gate|up, silu_mul, down (+=)
 * gather_rows, rmsnorm, linear lm_head, sample -> sampled [R]
 * ```
 *
 * ```ts
 * const model = await GpuModel.load(gpu, "fixtures/out/tiny-qwen3-moe", { maxNumTokens: 256 });
 * const out = model.forward(batch);
 * const tokens = await out.sampled;
 * ```
 */
import process from "node:process";
import { paced } from "../gpu/event_pacing.ts";
import { repeatedDispatches } from "../gpu/repeated_dispatches.ts";
import type { Gpu } from "../gpu/device.ts";
import { BufferUsage, MapMode } from "../gpu/device.ts";
import { createStorage, uploadBuffer, writeBuffer } from "../gpu/buffers.ts";
import { type HeldWrite, holdWrites, makeWrites } from "../gpu/held_writes.ts";
import { MAX_TIMED_PASSES, PassTimer } from "../gpu/timestamps.ts";
import {
  type BufferArg,
  compiledVariants,
  getPipeline,
  unsupportedReason,
  type Variant,
  variantByName,
} from "../../kernels/kernel.ts";
import type { ParamFields } from "../../kernels/params.ts";
import * as embedding from "../../kernels/embedding.ts";
import * as rmsnorm from "../../kernels/rmsnorm.ts";
import * as rmsnormF16 from "../../kernels/rmsnorm_f16.ts";
import * as gemv from "../../kernels/gemv.ts";
import * as gemvNorm from "../../kernels/gemv_norm.ts";
import * as gemvScaled from "../../kernels/gemv_scaled.ts";
import { laneGroupColumns } from "../../kernels/lane_group_variants.ts";
import * as gemm from "../../kernels/gemm.ts";
import * as gemmTc from "../../kernels/gemm_tc.ts";
import { MOE_TCP_VARIANTS } from "../../kernels/moe_gemm_gate_up_tc.ts";
import { moeExpertsFitTiles } from "../../kernels/expert_tiles.ts";
import * as moeGateUp from "../../kernels/moe_gemm_gate_up.ts";
import * as castF16 from "../../kernels/cast_f16.ts";
import * as splitkReduce from "../../kernels/splitk_reduce.ts";
import * as qkNormRopeCache from "../../kernels/qk_norm_rope_cache.ts";
import * as pagedAttention from "../../kernels/paged_attention.ts";
import * as pagedAttentionTc from "../../kernels/paged_attention_tc.ts";
import * as pagedAttentionDecode from "../../kernels/paged_attention_decode.ts";
import * as decodeReduce from "../../kernels/paged_attention_decode_reduce.ts";
import * as pagedAttentionDecodeQk from "../../kernels/paged_attention_decode_qk.ts";
import * as kvBlockCopy from "../../kernels/kv_block_copy.ts";
import * as siluMul from "../../kernels/silu_mul.ts";
import * as gatherRows from "../../kernels/gather_rows.ts";
import * as sample from "../../kernels/sample.ts";
import { ropeTable } from "../../kernels/rope.ts";
import { MOE_ROUTE_DISPATCH_MAX_TOKENS } from "../../kernels/moe_route_dispatch.ts";
import {
  MOE_DOWN_COMBINE_MAX_TOKENS,
  MOE_FUSED_ROUTER_MAX_TOKENS,
  MOE_FUSED_ROUTER_MIN_TOKENS,
  MOE_SPLIT_ROUTER_MAX_TOKENS,
  MOE_SPLIT_ROUTER_MIN_TOKENS,
  MOE_TC_ROWS_PER_EXPERT,
  MOE_TCS_ROWS_PER_EXPERT,
  MoeBlock,
} from "../../kernels/moe_block.ts";
import { MOE_STAGE_LABEL, type MoeStage } from "../../kernels/moe_cost.ts";
import { Checkpoint } from "./checkpoint.ts";
import { type ModelConfig, resolveModelConfig } from "./config.ts";
import { GpuWeights, type StorageDtype } from "./gpu_weights.ts";
import { type Placement, PLACEMENTS } from "../gpu/buffer_ranges.ts";
import { ModelOptionError } from "./model_option_error.ts";
import { kvBlockBytes, KvBuffers } from "./kv_buffers.ts";
import { KernelCall } from "./kernel_call.ts";
import type { ForwardModel, PreparedStep, StepBatch, StepOutput } from "./step_batch.ts";
import { type StepCost, stepCost, type StepForms, type StepShape } from "./step_cost.ts";

/** How the model is built. */
export interface GpuModelOptions {
  /** Storage type of weights and KV (default f16 where the adapter has it). */
  readonly dtype?: StorageDtype;
  readonly blockSize?: number;
  /** KV blocks (block 0 is the null block); default from kvCacheBytes. */
  readonly numBlocks?: number;
  /** KV memory when numBlocks is not given (default 256 MiB on a CPU adapter, 16 GiB else). */
  readonly kvCacheBytes?: number;
  /** Most tokens one step carries (scratch is sized for it; default defaultMaxNumTokens). */
  readonly maxNumTokens?: number;
  /** Most sequences one step carries. */
  readonly maxNumSeqs?: number;
  /** Model length limit (default: the config's max_position_embeddings). */
  readonly maxModelLen?: number;
  /** Time every dispatch in its own pass (for per-kernel profiles; slower). */
  readonly profile?: boolean;
  /**
   * GEMV forms of the linear layers: "decode" (lane groups meeting through subgroup shuffles,
   * f16 read as 32-bit words; default where subgroups of 8 or more exist on a GPU), "rows"
   * (one invocation per row; default on CPU adapters) or "classic" (one workgroup per row
   * and the staged form; elsewhere).
   */
  readonly gemvForms?: "decode" | "rows" | "classic";
  /**
   * Linear layers use the one-row GEMV up to this many rows (default 1 where the GEMV's
   * decode forms run, i.e. subgroups of 8 or more on a GPU; 8 elsewhere; 64 on CPU adapters).
   */
  readonly gemvMaxRows?: number;
  /**
   * Decode attention form: K/V tiles staged through workgroup memory ("tiled"), one key per
   * invocation read straight from memory ("direct"), one key per subgroup lane with a
   * subgroup softmax ("lanes": subgroups of exactly 8 or 32), or Q K^T and P V as f16
   * 16 x 16 x 16 products on the tensor cores ("tcdw": paged_attention_decode f16-tcdw, f16 KV
   * and subgroup matrices, K and V staged through workgroup memory as 16-byte words;
   * block_size a multiple of 16; "tcdw2" / "tcdw4": the same with the head's dims split among 2
   * or 4 subgroups a workgroup; "tcdw2h": tcdw2 whose softmax takes only the 8 rows a group of
   * at most 8 query heads a kv head fills). Default on GPUs: "tcdw2h" (where a kv head has at
   * most 8 query heads, else "tcdw2") for steps that read at least
   * DEEP_DECODE_KEYS context keys where it runs, "tiled" for the others and elsewhere; on CPU
   * adapters "direct" (faster there).
   */
  readonly decodeAttention?: DecodeAttentionForm;
  /**
   * Attention of prefill and mixed steps: "tc" (Q K^T and P V on the tensor cores,
   * paged_attention_tc `f16-tc`, K^T and V matrices loaded straight from the cache), "tc2" (its
   * two-key-tile variant), "tcs" (K and V staged through workgroup memory as 16-byte words,
   * `f16-tcs`), "tcs2" / "tcs4" (the same with 2 or 4 subgroups a workgroup sharing each
   * step's staged K and V, `f16-tcs2`, `f16-tcs4`) or "fma" (paged_attention). Default "tcs4"
   * where it runs (else "tcs2", else "tcs"): f16 KV, head_dim 128, block_size a multiple of 16,
   * at most 16 query heads a kv head, f16 16x16x16 subgroup matrices on 32-wide subgroups laid
   * out consecutively; else "fma". On the H200 (2026-12-01, one call, two rounds) "tcs" took 1 x
   * 2048 prefill steps from 198.4 to 172.5 ms and 8 x 2048 from 1380 to 1206 (the attention 60
   * -> 35 ms at 1 x 2048, 27 -> 47 TFLOP/s), 64 x 512 2104 -> 2047; in a later call "tcs2" took
   * 8 x 2048 to 1148.0 ms and 1 x 2048 to 168.8 ("tcs4": 1195.6 and 172.5). Since q goes through
   * a 16-row buffer in passes (2026-12-02), "tcs4" takes 11.5 KB of workgroup memory instead of
   * 24.6 (4 workgroups an SM of the H200's 48 KB instead of 1) and is the fastest: 1 x 2048
   * 133.2 -> 123.7 ms against the old "tcs2", 8 x 2048 860.4 -> 801.9 ("tcs2" now 129.4, 832.3).
   */
  readonly prefillAttention?: PrefillAttentionForm;
  /**
   * Decode attention's split plan (planDecodeSplits): about `workgroups` (split, seq, kv head)
   * workgroups a step, or the fewest whole waves of `wave` workgroups whose splits fit the form
   * (default: waves of 1536 on the tensor-core forms, 2048 workgroups on the others), and at
   * least `minTokens` keys a split (default decodeSplitMinTokens: 32 on the tiled forms, 64 on
   * the others). The H200 holds about 1536 of f16-tcdw2's
   * workgroups at once (read from the sweep, not measured apart): in one perf-attention sweep (2026-12-02, 1024-6144 workgroups, one
   * layer) the plan of one full wave read the most at 128 x 1024 (60% of the roof, against 56%
   * at 3072 workgroups and 52% at 4096), 64 x 1024 (51% against 44-46%), 32 x 8192 (69%
   * against 64%) and 8 x 8192 (46% against 38-41%), and at 64 x 8192, whose one wave would
   * need splits past f16-tcdw2's 1024 keys, two full waves (12 splits of 688 keys: 72%, against
   * 67% at 2048, 4096 and 6144). In the model (the same call, one run against two) the waves
   * took 128 x 1024 decode steps from 34.71 to 34.31 ms, 32 x 1024 26.61 -> 26.40, 8 x 8192
   * 17.47 -> 17.12, 16 x 8192 23.66 -> 23.11 and 32 x 8192 34.19 -> 33.56, left 64 x 8192 and
   * the steps of 1-16 x 1024 as they were (the same plans) and took 64 x 1024 from 28.90 to
   * 29.07; 8 x 131072 read 73.0% of the roof in 3 waves (144 splits of 912 keys) against 68.9%
   * at 3072 workgroups. Earlier (2026-12-01) 3072 workgroups was the one default:
   * at 128 x 1024 3072 and 2048 read 56%, 4096 53%. Earlier, on the
   * H200 (2026-12-01, one call, f16-tcdw with V over K) 2048 against 1024 took 32 x 1024 decode
   * steps from 29.84 to 29.27 ms, 64 x 1024 35.08 -> 34.50, 128 x 1024 40.37 -> 39.72, 8 x 8192
   * 19.61 -> 19.15, 16 x 8192 26.46 -> 25.86, and 16 x 1024 19.46 -> 19.89; 4096 was faster
   * still at 64 x 1024 (33.77) and 8 x 8192 (18.55) but slower at 16-32 x 1024 and 16 x 8192.
   */
  readonly decodeSplit?: {
    readonly workgroups?: number;
    readonly wave?: number;
    readonly minTokens?: number;
  };
  /**
   * Linear layers with more rows than gemvMaxRows and at most this many take a several-row
   * GEMV: with the decode forms linearFewRows up to its rows a pass (8: each weight row read
   * once), then linearManyRows / manyRowsByKind; default 128 on GPUs, 0 on CPU adapters;
   * the GEMM above.
   */
  readonly stagedMaxRows?: number;
  /**
   * The GEMV form (variant name without its dtype) for 2 up to its RT rows (a pass) with the
   * decode forms (default "dec8-w32c2" where subgroups are 32 wide, else "dec8"). From
   * tensorCoreRows rows (default 2) the tensor cores take precedence where they run.
   */
  readonly linearFewRows?: string;
  /**
   * The GEMV form (variant name without its dtype) for steps of up to gemvMaxRows rows with the
   * decode forms (default "dec-w32u8" where subgroups are 32 wide, else "dec"). H200
   * (2026-12-03, perf-decode, two processes each way, alternating): batch-1 steps 4.62 / 4.58 ms
   * of GPU with dec-w32 (4 loads in flight a lane), 4.50 / 4.50 with dec-w32u8, 4.54 / 4.54 with
   * dec-w32u16 at ctx 1024; 4.93 / 4.88, 4.78 / 4.78 and 4.83 / 4.84 at 8192.
   */
  readonly linearOneRow?: string;
  /**
   * The GEMV form for more rows, up to stagedMaxRows (default "staged"; a lane-group form
   * such as "dec8-w32c2" takes its rows RT a pass). From tensorCoreRows rows the tensor
   * cores take precedence where they run (set tensorCoreRows 0 to compare these forms).
   */
  readonly linearManyRows?: string;
  /**
   * Per linear kind, its form for those rows instead of linearManyRows: a GEMV form or "gemm"
   * (the 64 x 64 GEMM, or the tensor cores from tensorCoreRows where they run), merged over
   * the defaults. A GEMV form named here keeps its rows from the tensor cores. Default with
   * the decode forms on 32-wide subgroups: the router "dec8-w32c2-rb" and the LM head "gemm"
   * (H200, 64 x 1024: router 2.67 -> 1.39 ms, LM head 3.14 -> 2.40 ms; the same row blocks
   * made qkv and o slower, 6.06 -> 6.98 and 5.20 -> 5.67).
   */
  readonly manyRowsByKind?: Partial<Record<"qkv" | "o" | "router" | "lmHead", string>>;
  /** The MoE block's decode forms instead of its own choice (MoeBlockOptions.decodeForms). */
  readonly moeDecodeForms?: { readonly gateUp?: string; readonly down?: string };
  /**
   * GEMM rows up to which linear layers take the 64 x 64 tiles (twice the workgroups) rather
   * than the 64 x 128 ones (default 384). On the H200, end to end, 256-row prefills ran 9-14%
   * faster before the 64 x 128 tiles came and 512-row ones 8% slower, most likely the GEMM.
   */
  readonly gemmSmallMaxRows?: number;
  /**
   * Linear layers with at least this many rows take the tensor-core GEMM (`cast_f16` of
   * the activations, then `gemm_tc`) where the device has f16 16x16x16 subgroup matrices
   * on 32-wide subgroups, the weights are f16 and the layer's n and k are multiples of 16;
   * 0: never. Default 2 there (every step past the one-row GEMV), else 0. On the H200
   * (2026-11-30, Qwen3-30B-A3B) decode steps of 16-128 rows ran 8-24% faster and prefills of
   * 128-2048 tokens 10-23% faster; on 2026-12-02 (session 21, in one call, 9 -> 2) steps of 2, 4
   * and 8 rows against the `dec8-w32c2` GEMV: 2 x 1024 8.73 -> 8.12 ms, 4 x 1024 10.88 -> 10.14,
   * 8 x 1024 14.02 -> 13.11, 2 / 4 / 8 x 8192 9.97 / 12.42 / 16.64 -> 9.35 / 11.66 / 15.77 (at 8
   * rows perf-linear read qkv in 16.3 µs a layer, `f16-tcs16` in 4 splits, and o in 16.0). A
   * kind with its own form in manyRowsByKind (the router by default) keeps that form up to
   * stagedMaxRows: the router's 64 rows took 1.86 ms a step on the tensor cores against 1.49 on
   * its row blocks.
   */
  readonly tensorCoreRows?: number;
  /**
   * The tensor-core GEMM's row tile (16, 32 or 64 rows a workgroup; gemm_tc's tiles and the
   * staged forms alike), or 0 for its own choice by rows (see tensorCoreVariantFor).
   */
  readonly tensorCoreTile?: 0 | 16 | 32 | 64;
  /**
   * Linear layers of tensorCoreRows up to this many rows (at most 128) run the tensor-core
   * GEMM's staged forms (weights read once a workgroup as 16-byte words through workgroup
   * memory; which one: tensorCoreVariantFor) where they compile and k is a multiple of 64;
   * more rows, or 0 here, take the prefill form (tensorCorePrefill), split-K in splits of at
   * least 256 of k up to 128 rows.
   * Default 128: on the H200, at ctx 1024, steps of 16 and 32 rows ran 1.7-2.9% faster on them
   * than on gemm_tc (2026-11-30); at 64 rows the 16-row form took the step from 43.0 to 41.4
   * ms and at 128 from 52.5 to 52.3 (2026-12-01), where the 64-row form had been slower than
   * gemm_tc (qkv's weights at 221 GB/s from too few resident workgroups). Later the same day
   * the prefill form tcp128x128 in splits of 256 took 128 x 1024 from 47.56 to 45.90 ms (the
   * staged f16-tcs128x8 before), but 64 x 1024 from 38.15 to 40.75 and 32 x 1024 from 31.39 to
   * 34.59, so the staged forms kept up to 64 rows. With the staged forms of session 42 (their
   * weights through two register sets, several subgroups a workgroup) the order turned past 64
   * rows (session 44, `call2`, two processes each way in turn): 72 / 80 / 96 / 112 x 1024
   * 28.11-28.14 / 28.77 / 28.44 / 30.15-30.18 ms on the staged forms against 28.56-28.59 /
   * 29.30-29.34 / 28.98 / 30.67-30.71 on tcp128x128 (1.6-1.9% faster), 128 x 1024 30.58 against
   * 30.53-30.57 (`call1`: 96 x 1024 28.45-28.46 against 29.05-29.07, 128 x 1024 30.63 against
   * 30.62-30.65).
   * Past 64 rows they run tcs64x4 in row blocks (see tensorCoreVariantFor), which took those
   * steps lower again (`call4`).
   */
  readonly tensorCoreDecodeRows?: number;
  /**
   * The staged forms' subgroups a workgroup: "one" (`f16-tcs16/32`) or "rows" (default), one
   * subgroup a row tile of 16 (`f16-tcs32x2` for 17-32 rows, `f16-tcs64x4` for 33-128, in row
   * blocks of 64 past 64: the 32 weight rows staged a step feed every row tile of the
   * workgroup; where they do not compile, "one"). On
   * the H200 (2026-12-01, one call, split-K of at least 1024 of k against 512 for "one") they
   * took 32 x 1024 from 32.90 to 31.49 ms, 64 x 1024 from 40.79 to 38.32 and 128 x 1024 from
   * 50.82 to 47.90 (per kernel at 64 x 1024, profiles of two calls, split-K 512 in both: qkv
   * 4.06 -> 3.44 ms, o 4.00 -> 2.74).
   */
  readonly tensorCoreDecodeSubgroups?: "one" | "rows";
  /**
   * The tensor-core GEMM's form past tensorCoreDecodeRows (prefill-sized steps) when no
   * tensorCoreTile is asked for: "tc" (gemm_tc's tiles, matrices loaded straight from memory)
   * or a prefill form of gemm_tcp.wgsl (several subgroups of 4 x 4 tiles, both operands staged
   * through workgroup memory, double-buffered): "tcp64x64", "tcp128x64", "tcp64x128",
   * "tcp128x128" (rows x columns a workgroup). A prefill form that does not compile gives way
   * to gemm_tc's tiles. Default "tcp128x128": on the H200 (2026-12-01, one call, 1 x 2048 on
   * Qwen3-30B-A3B) qkv took 46.0 -> 18.0 ms a step (45 -> 114 TFLOP/s) and o 37.4 -> 15.6,
   * against tcp128x64 20.7 / 19.2, tcp64x128 21.8 / 19.8 and tcp64x64 26.7 / 26.3. Steps of more
   * than PREFILL_WIDE_ROWS rows take tensorCorePrefillWide instead.
   */
  readonly tensorCorePrefill?: TensorCorePrefillForm;
  /**
   * The tensor-core GEMM's form for steps of more than PREFILL_WIDE_ROWS rows (where no
   * tensorCoreTile is asked for). Default "tcp256x128" (8 subgroups, 16 of k a step): the
   * staged words' stores to workgroup memory bound these kernels on the H200, and a 256 x 128
   * tile stores 3/256 of a word a product against 128 x 128's 1/64. On the H200 (2026-12-01,
   * perf-linear, Qwen3-30B-A3B shapes) qkv at 2048 rows took 351.6 -> 294.1 µs a layer, o 272.2
   * -> 194.2, and at 16384 rows 2847.5 -> 2086.2 and 2890.9 -> 2045.1 (tcp128x256 within 2%).
   */
  readonly tensorCorePrefillWide?: TensorCorePrefillForm;
  /**
   * The LM head's tensor-core GEMM by the step's sampled rows, in place of the linear layers'
   * choice (tensorCoreVariantFor): the first entry whose maxRows covers the rows, a gemm_tc
   * form (f16-...) that compiles here; rows past every entry, an entry that does not compile,
   * or [] keep the linears' choice. The LM head's 151,936 x 2048 weights (Qwen3) are read by
   * many more workgroups than any other linear's, and the forms of 32 columns a workgroup
   * stage as many words of the activations as of the weights. Default LM_HEAD_FORMS.
   */
  readonly lmHeadForms?: readonly LmHeadForm[];
  /**
   * The least k a split of the staged forms takes (a multiple of 64), as given. Default: each
   * form's own (gemm_tc's stagedSplitMinK: 1024 for the several-subgroup forms of 64 and 128 rows,
   * 512 for tcs32x2 and the one-subgroup ones, 256 for the prefill forms), times its row blocks
   * where a staged form takes more rows than its own (decodeSplits).
   * Split-K partial sums cost as much traffic as the weights at 16 splits.
   */
  readonly tensorCoreSplitMinK?: number;
  /**
   * Split-K of the tensor-core GEMM for steps of at most 128 rows: about this many
   * workgroups a linear layer (default 2048; 0: never split; the prefill forms of 65-128 rows
   * take at most one wave, TC_TCP_DECODE_WAVE). Few rows give few (row, column)
   * tiles, and each subgroup then waits on memory alone; k splits add subgroups, and
   * `splitk_reduce` adds their partial sums. Past 128 rows (prefill) only a layer whose tiles
   * leave most of the GPU idle splits (prefillSplits); 0 turns that off too.
   */
  readonly tensorCoreSplitTarget?: number;
  /**
   * Tensor-core linears of at most this many rows whose staged form has an f32 twin (gemm_tc's
   * GEMM_TC_A32) run that twin, which reads the f32 activations and rounds them to f16 as it
   * stages them: no cast_f16 dispatch before qkv, o and the LM head. 0: never. Default
   * TC_F32_INPUT_ROWS (16): on the H200 (2026-12-02, three calls) steps of 2-16 rows took
   * 0.09-0.15 ms less (2 x 1024 7.60 -> 7.49, 8 x 1024 12.21 / 12.25 -> 12.12 / 12.12, 16 x
   * 1024 17.13 -> 16.99), 32 x 1024 was unchanged (23.35 -> 23.28) while each twin alone ran
   * 2-7% slower than its form (perf-linear); an earlier session found the 17-64-row twins
   * slower kernels with unchanged steps.
   */
  readonly tensorCoreF32InputRows?: number;
  /**
   * MoE steps of more than this many rows an expert on average run the expert GEMMs on the
   * tensor cores where they can (MoeBlockOptions.tensorCoreRowsPerExpert; default
   * MOE_TC_ROWS_PER_EXPERT = 8, 0 never).
   */
  readonly moeTensorCoreRows?: number;
  /**
   * MoE steps of more than this many rows an expert on average, up to moeTensorCoreRows, run
   * the expert GEMMs' tensor-core decode forms (MoeBlockOptions.tensorCoreDecodeRowsPerExpert;
   * default MOE_TCS_ROWS_PER_EXPERT = 2, below 0 never).
   */
  readonly moeTensorCoreDecodeRows?: number;
  /**
   * f16 MoE steps of moeFusedRouterMinTokens (2) to this many tokens route in one dispatch, the
   * router's logits and
   * top-k together (MoeBlockOptions.fusedRouterMaxTokens; default
   * MOE_FUSED_ROUTER_MAX_TOKENS, 0 never: the router's GEMV and moe_router).
   */
  readonly moeFusedRouterTokens?: number;
  /**
   * The fewest tokens of an f16 MoE step that routes in one dispatch
   * (MoeBlockOptions.fusedRouterMinTokens; default MOE_FUSED_ROUTER_MIN_TOKENS = 2; 1 takes
   * batch-1 decode there too, not measured on the H200 with the router's fused norm).
   */
  readonly moeFusedRouterMinTokens?: number;
  /**
   * MoE steps of 1 to this many tokens that do not route in one pass take the router's top-k
   * and the dispatch in one workgroup (moe_route_dispatch; MoeBlockOptions.routeDispatchMaxTokens;
   * default MOE_ROUTE_DISPATCH_MAX_TOKENS = 16, 0 never: moe_router and moe_dispatch).
   */
  readonly moeRouteDispatchTokens?: number;
  /**
   * Batch-1 MoE steps that would take moe_route_dispatch rank their logits inside the gate/up
   * GEMM where its decode form has a routed twin (moe_gemm_gate_up_routed, one dispatch a layer
   * fewer; MoeBlockOptions.routedGateUp); default true.
   */
  readonly moeRoutedGateUp?: boolean;
  /**
   * f16 MoE steps of moeSplitRouterMinTokens to this many tokens take the layer's input RMSNorm
   * and the router logits over the GPU (moe_router_logits), then the top-k apart
   * (MoeBlockOptions.splitRouterMaxTokens; default MOE_SPLIT_ROUTER_MAX_TOKENS, 0 never; off
   * with moeRouterNorm false).
   */
  readonly moeSplitRouterTokens?: number;
  /** The fewest tokens of a step that splits its router (default MOE_SPLIT_ROUTER_MIN_TOKENS). */
  readonly moeSplitRouterMinTokens?: number;
  /**
   * Steps whose qkv projection splits k on the tensor cores leave its partial sums for
   * qk_norm_rope_cache to add up, one splitk_reduce dispatch a layer fewer; default true.
   */
  readonly qkvPartialsInRope?: boolean;
  /**
   * MoE layers whose router takes the input norm in one pass (moe_router_norm) add the o
   * projection's split-K partial sums to the residual there, one splitk_reduce dispatch a
   * layer fewer; default true.
   */
  readonly oPartialsInRouter?: boolean;
  /**
   * Decode steps whose attention form has a twin in paged_attention_decode_qk (the tiled forms,
   * f16-tcdw2 and f16-tcdw2h) take qk_norm_rope_cache's work inside the attention: each
   * workgroup norms and rotates its query heads from the projection (its split-K partials added
   * up there too), the split that holds a sequence's new key writes its K and V, one dispatch a
   * layer fewer; where the qkv
   * GEMM leaves split-K partial sums, only in steps whose splits hold at least
   * QK_IN_ATTENTION_MIN_SPLIT_KEYS keys; default true.
   */
  readonly qkInDecodeAttention?: boolean;
  /**
   * Steps whose qkv projection casts its input to f16 for the tensor cores take that copy
   * from the previous MoE layer's moe_combine_norm instead (it writes the normed rows in f16
   * too), one cast_f16 dispatch a layer fewer; default true.
   */
  readonly combineNormF16?: boolean;
  /**
   * Steps whose o projection casts its input to f16 for the tensor cores take that copy from
   * the attention: in decode steps from the split attention's merge
   * (paged_attention_decode_reduce writes its rows in f16 too), in prefill and mixed steps from
   * the staged prefill attention's `-o16` twin (which writes O as f16 only); one cast_f16
   * dispatch a layer fewer; default true.
   */
  readonly mergeF16?: boolean;
  /**
   * Prefill and mixed steps on a staged attention form with a `-q16` twin (the default
   * f16-tcs4) have qk_norm_rope_cache write q times the attention's scale as f16, which the
   * twin stages as it is: the same f16 values the form would make of an f32 q, half the bytes
   * (at 16384 tokens 256 MB of f32 q a layer written and read again); default true.
   */
  readonly prefillQF16?: boolean;
  /**
   * Rotation pairs each invocation of qk_norm_rope_cache takes in f16 models: 1 (`f16`, 8 heads
   * a workgroup at head_dim 128), or the lab forms' 4 and 8 (`f16-p4`, `f16-p8`: 16 and 32 heads
   * a workgroup, more of its reads in flight before its barriers). On the H200 `validate` read
   * them 13-16% faster than `f16` at 16384 tokens (session 51), but its time for this kernel is
   * 5x what a model step's profile reads, so a model A/B decides. Default 1.
   */
  readonly qkNormPairs?: 1 | 4 | 8;
  /**
   * A MoE layer followed by another ends with that layer's input RMSNorm fused into its
   * combine (moe_combine_norm: one dispatch a layer fewer); default true.
   */
  readonly fuseCombineNorm?: boolean;
  /**
   * Steps whose qkv projection takes a one-row GEMV form (batch-1 decode) norm that layer's
   * input inside it (gemv_norm: the GEMV reads the residual row and sums its squares on the
   * way), so neither rmsnorm nor the MoE combine before it writes a normed row; the MoE block
   * then fuses its combine into the down GEMM (moe_gemm_down_combine, see moeDownCombineTokens):
   * one dispatch a layer fewer. Default true.
   */
  readonly qkvNormInGemv?: boolean;
  /**
   * In those steps, where the layer before is a MoE layer whose down GEMM adds to the residual,
   * that kernel also leaves the layer's input weighted by its norm weight and the residual's
   * squares in block sums, and the qkv GEMV only scales its sums (gemv_scaled) where gemv_norm
   * weights and squares each x value as it reads it. Default true.
   */
  readonly qkvScaledAfterMoe?: boolean;
  /**
   * MoE steps of 1 to this many tokens that take the lane-group expert forms, where the next
   * layer's input norm is not the combine's (qkvNormInGemv), run moe_gemm_down_combine: the
   * down GEMM adds the weighted expert rows to the residual itself (default 1; 0 never).
   */
  readonly moeDownCombineTokens?: number;
  /** moe_gemm_down_combine's form (`dc-w32c4`, `dc-w32c2`, `dc-w32c4-wg128`, `dc`; default: MoeBlock's). */
  readonly moeDownCombineForm?: string;
  /**
   * Batch-1 steps whose qkv GEMV norms its input (qkvNormInGemv), whose router splits
   * (moe_router_logits) and whose down GEMM adds to the residual (moe_gemm_down_combine) run the
   * MoE layers' o projection's one-row GEMV in this many split-K parts (grid z; 1: unsplit, at
   * most 16): the router norms the residual with their partial sums added and the down GEMM
   * adds them to it, with no reduce. Default O_SPLITS_ONE_ROW.
   */
  readonly oSplitsOneRow?: number;
  /**
   * MoE steps that route in one pass (moeFusedRouterTokens) take the layer's input RMSNorm in
   * the router too (moe_router_norm: one dispatch a layer fewer; MoeBlockOptions.fusedRouterNorm);
   * default true.
   */
  readonly moeRouterNorm?: boolean;
  /**
   * The MoE expert GEMMs' form for prefill-sized steps on the tensor cores: "tc" (operands
   * straight from memory) or a prefill form staging both through workgroup memory, "tcp1",
   * "tcp2" or "tcp4" subgroups a workgroup over 64-row work items, or "tcp4x2" (tcp4 twice, over
   * 128-row work items) (MoeBlockOptions.tensorCorePrefill). On the H200 (2026-12-01, one call,
   * 1 x 2048 on Qwen3-30B-A3B, linears on tcp128x128) "tcp4" took gate/up from 126.1 to 62.4 ms
   * a step and down from 62.5 to 33.2 (39-40 -> 74-79 TFLOP/s), against tcp2 76.3 / 40.8 and
   * tcp1 79.3 / 41.9. Default "tcp4x2": each staged weight word feeds 128 rows, 40% fewer
   * staging stores a product; in a later call gate/up 61.7 -> 44.5 ms and down 32.8 -> 25.6 at
   * 1 x 2048, 392.7 -> 246.1 and 198.1 -> 138.0 at 8 x 2048 (100 -> 143-161 TFLOP/s).
   */
  readonly moeTensorCorePrefill?: MoeTensorCorePrefillForm;
  /**
   * Steps on that prefill form write the experts' down rows as f16 and combine them from f16
   * (MoeBlockOptions.downRowsF16): half of those rows' bytes, at 16384 tokens 1 GB of f32 a
   * layer written and read again, for two barriers a tile in the down GEMM and one f16
   * rounding of each expert row. Default true: on the H200 (session 51, `call2`, caa807a)
   * perf-prefill took 1 x 2048 from 115.4 to 111.7 ms, 8 x 2048 728.1 -> 708.4 and 64 x 512
   * 1237.4 -> 1198.0 (the down GEMM 2834 -> 2481 µs a layer at 8 x 2048, the combine 331 ->
   * 271), and 512 tokens' logits (std 1.0) moved by 0.0087 on average, 0.32 at most, argmax
   * equal at 492 of 512 positions (`call1`): the size of the differences between two sum
   * orders of the f32 forms (0.015, 0.32, 61 of 64 in session 10).
   */
  readonly moeDownRowsF16?: boolean;
  /**
   * Store the MoE expert weights in tiles of 16 rows x 64 columns (kernels/expert_tiles.ts)
   * instead of row by row, and run the expert GEMMs' tiled twins. f16 only, hidden and expert
   * width multiples of 64; default on where those hold on a GPU with subgroups
   * (expertTilesByDefault; not on CPU adapters, whose forms were never compared). On the H200
   * (2026-12-01, one call, perf-decode with and without) the tiles took 64 x 1024 decode steps
   * from 30.05 to 29.07 ms, 128 x 1024 35.96 -> 34.98 and 64 x 8192 43.69 -> 42.72, and 8 x
   * 1024 14.40 -> 14.52 and 8 x 8192 17.40 -> 17.57 (the lane-group forms at one row an
   * expert: 1% slower); 1 x 1024 5.44 -> 5.47;
   * prefill 8 x 2048 869.1 -> 859.4 ms, 64 x 512 1434.9 -> 1416.7. Synthetic weights are drawn
   * per stored position, so the two layouts draw different (equally random) experts.
   */
  readonly moeExpertTiles?: boolean;
  /**
   * How the weights take GPU memory (buffer_ranges.ts' Placement): "each", a buffer a
   * weight, or "arena", every weight a range of as few buffers of at most 16 GiB as the
   * adapter allows (four for Qwen3-30B-A3B in f16), ranges of 2 MiB and more starting on 2 MiB.
   * Default "arena": on the H200 (session 48) a loads-only probe read the 48 layers' down
   * weights cold at 82% of the read roof in arenas against 34% a buffer each, and the model's
   * decode steps at batch 8 and 64 read 0.2-0.7% shorter in all eight paired runs (batch 1
   * within its noise); "each" stays selectable.
   */
  readonly weightPlacement?: Placement;
  /**
   * How the KV cache takes GPU memory (buffer_ranges.ts' Placement): "each", a buffer a
   * layer's K and V (0.6 GB each at 60 GB of cache on Qwen3-30B-A3B), or "arena", ranges of a
   * few arenas of at most 16 GiB. Default "each": on the H200 (session 48) the KV cache in
   * arenas moved no decode step beyond the weights' arenas (within 0.4%, both ways).
   */
  readonly kvPlacement?: Placement;
  /**
   * f16 weights and KV read as 32-bit words by the decode-shaped kernels (the `-packed`
   * variants: GEMV, staged and subgroup MoE GEMMs, decode attention). Default: on when the
   * environment sets WEBFPM_F16_PACKED=1. On the H200 it moved no decode point by more than
   * 0.3% end to end (the decode forms read f16 this way whatever this says).
   */
  readonly packedF16?: boolean;
  /**
   * Layers a step with prefill tokens (or any step while none is in flight) encodes before
   * it submits them, so the GPU starts on the first layers while the host encodes the rest
   * (WebGPU runs nothing before a submit; CUDA starts each launch at once); 0: one submit a
   * step. A decode-only step behind one in flight takes one submit: the GPU is busy with
   * that one, and each submit costs host time. GPU time is the sum of the submits' spans.
   * Default: WEBFPM_SUBMIT_LAYERS, else 6. On the H200 (Qwen3-30B-A3B, 48 layers) the bench's
   * prefill points measured a median 6.2 ms of wall beyond GPU time with one submit and 1.5 ms
   * with 6 layers a submit (wall within 10% of GPU at 53 of 60 points instead of 24); in
   * pipelined decode steps 6 layers a submit took B1's host encoding from 4.0 to 6.4 ms and
   * its wall from 1.02x GPU to 1.18x.
   */
  readonly submitLayers?: number;
}

/** A placement option's value (buffer_ranges.ts), "each" when not given; else refused by name. */
function checkPlacement(
  name: string,
  value: Placement | undefined,
  byDefault: Placement = "each",
): Placement {
  const placement = value ?? byDefault;
  if (!PLACEMENTS.includes(placement)) {
    throw new ModelOptionError(`${name}: '${placement}' is neither ${PLACEMENTS.join(" nor ")}`);
  }
  return placement;
}

/** Prefill attention forms (see GpuModelOptions.prefillAttention). */
export type PrefillAttentionForm = "tc" | "tc2" | "tcs" | "tcs2" | "tcs4" | "fma";

/** Decode attention forms (see GpuModelOptions.decodeAttention). */
export type DecodeAttentionForm =
  | "tiled"
  | "direct"
  | "lanes"
  | "tcdw"
  | "tcdw2"
  | "tcdw4"
  | "tcdw2h";

/**
 * Decode steps reading at least this many context keys (summed over the step's sequences)
 * take the tensor-core attention (f16-tcdw) by default where it runs. On the H200 (2026-12-01)
 * the first tensor-core form (tcd, K/V matrices straight from the cache, since removed) took
 * 64 x 8192 from 85.1 to 73.9 ms a step and 64 x 1024 (65,536 keys) from 43.2 to 42.8, and was
 * 0.3-0.4 ms slower than tiled at 1 and 8 x 1024 (few workgroups of a longer step chain).
 * tcdw then took 64 x 8192 to 62.34 ms with q in workgroup memory and to 56.17 with q in
 * registers (32 x 8192 46.65 -> 44.40 -> 40.37, 64 x 1024 38.13 -> 36.83, 8 x 8192 20.84 ->
 * 19.61; at 8 x 1024 15.42 against tiled's 15.60). With q in registers, in one call (2026-12-01,
 * perf-decode with --decode-attention tcdw beside the defaults), 1 x 8192 took 6.68 ms against
 * tiled's 7.06 and 8 x 1024 15.41 against 15.50, while 1 x 1024 took 6.02 against 5.88: steps of
 * 8192 keys or more take tcdw. With f16-tcdw2h (2026-12-03, session 33, perf-decode with
 * --decode-attention tcdw2h beside the defaults, two processes each) the crossover moved down:
 * 1 x 3072 4.42-4.44 ms against tiled's 4.53-4.55, 2 x 3072 6.91 against 7.25-7.28, 1 x 4096
 * 4.46-4.48 against 4.60-4.61, 4 x 1024 8.63-8.70 against 8.68-8.73, 1 x 6144 4.55-4.57 against
 * 5.03; below 3072 keys it is no faster (1 x 1024 4.38 against 4.38-4.40, 1 x 2048 4.40 against
 * 4.42-4.43, 2 x 1024 6.79-6.86 against 6.67-6.71), and 2 x 2048 reads 6.87-6.88 against
 * 6.85-6.87: steps of 3072 keys or more take it.
 */
export const DEEP_DECODE_KEYS = 3072;

/** A decode step's attention variant and split plan (GpuModel.lastDecodeSplit). */
export interface DecodeSplitOfStep {
  readonly variant: string;
  /** Keys a split. */
  readonly splitTokens: number;
  readonly numSplits: number;
}

/**
 * The tensor-core decode attention variant of deep steps. On the H200 (2026-12-01, one call,
 * perf-decode --decode-attention tcdw2 against the tcdw of the call before) f16-tcdw2 took 128 x
 * 1024 decode steps from 37.85 to 36.58 ms, 64 x 1024 31.67 -> 31.10 and 64 x 8192 46.68 ->
 * 45.81; tcdw4 took 128 x 1024 to 36.66, 64 x 1024 to 30.95, 32 x 8192 37.41 -> 36.53 and 64 x
 * 8192 to 48.53.
 */
const TC_DECODE_VARIANT = "f16-tcdw2";
/**
 * ... and f16-tcdw2 whose softmax takes 8 rows, taken first where a kv head has at most 8 query
 * heads. On the H200 (2026-12-02, one call, against --decode-attention tcdw2) it took 64 x 8192
 * decode steps from 42.04 to 41.56 / 41.55 ms, 32 x 8192 30.65 -> 30.31 / 30.37, 8 x 8192 15.04
 * -> 14.89 / 14.89, 128 x 1024 34.06 -> 33.76 / 33.82 (8 and 32 x 1024 unchanged); perf-attention
 * read 64 x 8192 at 75.7% of the roof against 72.9%, 8 x 131072 at 77.8% against 75.1%.
 */
const TC_DECODE_HALF_ROWS = "f16-tcdw2h";
/** Decode attention's split plan by default: about this many workgroups a step. */
const DECODE_SPLIT_WORKGROUPS = 2048;
/**
 * ... on the tensor-core forms: whole waves of this many, or half waves (below). The name says
 * "wave", but the H200 holds only about 768 f16-tcdw2h workgroups at once (6 an SM: about 48
 * KB of workgroup memory an SM bounds them, 7,752 bytes each, as probe-reads measured in session
 * 26, and their registers come close): 64 x 8192 in perf-attention (2026-12-02, session 25)
 * read 76.9% of the roof in 768 workgroups (3 splits of 2736 keys), 75.4% in 1536 (6 of 1376),
 * but 53.7% in 1024 (4 of 2048), a wave and a third; f16-tcdw2h with 32 more registers a lane
 * read 51.1% in 768, and with 4.3 KB more workgroup memory (q's matrices in it, session 26)
 * 48.7%. Both of the plans this rule takes are whole multiples of 768.
 */
const DECODE_SPLIT_WAVE_TC = 1536;
/**
 * ... or half waves (768) where that plan's splits take at least this many keys and its
 * workgroups fill a half wave: fewer, longer splits spend less of each workgroup on its start
 * and its partials. On the H200 (2026-12-02, session 21, --split-waves 768 against 1536, two
 * runs each) half waves took 8 x 8192 from 15.02 to 14.59 ms (splits of 352 keys), 16 x 8192
 * 21.27 -> 20.77, 64 x 8192 41.92 / 42.03 -> 41.51 / 41.70 and 64 x 1024 28.98 -> 28.65 (352
 * keys), but 32 x 1024 23.27 -> 23.81 (splits of 176 keys). With this rule (session 22, against
 * --split-waves 1536, f16-tcdw2h): 8 x 8192 14.72 -> 14.43 / 14.46, 32 x 8192 30.47 -> 29.95 /
 * 30.05, 64 x 8192 41.70 -> 41.10 / 41.11, 64 x 1024 28.99 -> 28.64 / 28.66; 32 x 1024 and 128 x
 * 1024 (whose half wave would be one split of 1024 keys in 512 workgroups: 60.7% of the roof in
 * perf-attention against 61.9% in 3) keep their plans.
 */
const DECODE_HALF_WAVE_MIN_KEYS = 256;
/**
 * ... and half waves where their splits stay under this many keys while the whole-wave plan's
 * workgroups that hold keys overflow a half wave (its splits at or near the 64-key minimum: 96
 * keys a split instead). On the H200 (session 35, `call6`, perf-decode with --split-min-tokens
 * 96 against the default, two processes each) 16 x 1024 took 16.01-16.04 ms in 11 splits of 96
 * keys against 16.30-16.39 in 17 of 64 (1,088 workgroups), 2 x 8192 7.30-7.34 against 7.46-7.53
 * (1,032), 4 x 4096 8.98-9.06 against 9.23-9.24 (1,040); where the plan of 64 keys fits a half
 * wave 96 keys were slower (1 x 4096 4.44-4.45 against 4.37-4.38, 4 x 1024 8.79-8.80 against
 * 8.71-8.73, 1 x 8192 4.57 against 4.55), and splits of 176 keys slower still (`call5`, in
 * waves of 792: 32 x 1024 22.66-22.72 against 22.13-22.15 in 11 splits of 96, 16 x 2048 17.42
 * against 16.82, 8 x 4096 12.85-12.88 against 12.35-12.43), though perf-attention reads the
 * split kernel faster in them (`call4`: 32 x 1024 29.7 µs against 35.5).
 */
const DECODE_HALF_WAVE_SHORT_KEYS = 128;
/**
 * Decode steps whose qkv projection leaves split-K partial sums take qk_norm_rope_cache inside
 * the attention (qkInDecodeAttention) only where its splits hold at least this many keys: every
 * workgroup adds up those partials for its query heads, which short splits do not pay for. On
 * the H200 (session 34, `call4`, inside against apart, two processes each) splits of 64-96 keys
 * read 0.8-3.0% slower inside (2 / 4 / 16 / 32 x 1024 6.76 / 8.72 / 16.80 / 22.87 ms against
 * 6.69 / 8.66 / 16.43 / 22.42, 8 x 2048 12.34 against 11.99, 8 x 4096 12.92 against 12.55),
 * splits of 352 keys and more the same or faster (128 x 1024 31.91 against 31.92, 64 x 1024
 * 26.96-26.97 against 27.27-27.30 in `call3`, 32 x 4096 25.15 against 25.47, 64 x 8192
 * 37.95-37.98 against 39.62-39.68; 16 x 4096 18.39 against 18.25, the exception); batch 1 (a
 * GEMV, no partials) 2-3% faster at every depth.
 */
const QK_IN_ATTENTION_MIN_SPLIT_KEYS = 256;
/** The tensor-core form deep steps fall back to where f16-tcdw2 cannot run (lanes not consecutive). */
const TC_DECODE_FALLBACK = "f16-tcdw";

/** What decides the tensor-core decode attention form of deep steps (deepDecodeVariant). */
export interface DeepDecodeContext {
  readonly dtype: StorageDtype;
  readonly numQHeads: number;
  readonly numKvHeads: number;
  readonly blockSize: number;
  readonly minSplitTokens: number;
}

/**
 * The tensor-core decode attention form the model takes for deep steps here, or undefined
 * where none runs: the first that runs of f16-tcdw2h (where a kv head has at most 8 query
 * heads), f16-tcdw2, f16-tcdw (tcDecodeReason).
 */
export function deepDecodeVariant(gpu: Gpu, c: DeepDecodeContext): string | undefined {
  const halfRows = pagedAttentionDecode.tcHalfRowsReason({
    num_q_heads: c.numQHeads,
    num_kv_heads: c.numKvHeads,
  }) === null;
  return [...(halfRows ? [TC_DECODE_HALF_ROWS] : []), TC_DECODE_VARIANT, TC_DECODE_FALLBACK]
    .find((v) => tcDecodeReason(gpu, c.dtype, c.blockSize, c.minSplitTokens, v) === null);
}

/**
 * GpuModelOptions.decodeSplit.minTokens' default on the forms other than the tiled ones (the
 * tensor-core, direct and one-key forms): the fewest keys a decode split takes.
 */
export const DECODE_SPLIT_MIN_TOKENS = 64;

/**
 * GpuModelOptions.decodeSplit.minTokens' default on the tiled FMA forms (`f16-tiled`, the form of
 * the steps under DEEP_DECODE_KEYS keys on the H200, where the plan's ~2048 workgroups ask for
 * fewer keys a split than that floor, so the floor sets the plan). H200, Qwen3-30B-A3B
 * (session 36, perf-decode, two processes each, alternating; GPU ms at 64 -> 32 keys a split):
 * 1 x 512 4.19-4.20 -> 4.07, 1 x 1024 4.21-4.23 -> 4.09-4.10, 1 x 2048 4.25 -> 4.19-4.20,
 * 2 x 512 6.74-6.78 -> 6.54-6.55, 2 x 1024 6.73-6.77 -> 6.63, 4 x 512 8.58-8.65 -> 8.50-8.52;
 * at 16 keys 4.06-4.08, 4.11-4.13, 4.46, 6.60-6.61, 6.84 and 8.61-8.65. The tensor-core forms
 * read the same at 32 as at 64 (4 x 1024 8.66-8.72 against 8.63-8.78, 8 x 1024 11.49-11.52
 * against 11.43-11.62) and slower at 1 x 4096 (4.38-4.42 against 4.35-4.36): they keep 64.
 */
export const DECODE_SPLIT_MIN_TOKENS_TILED = 32;
// (f32-tiled and f16-tiled-packed take it too; they were not measured at it)

/** The fewest keys a decode split of `variant` takes by default (see the two constants above). */
export function decodeSplitMinTokens(variant: Variant): number {
  const tiled = variant.consts?.TK !== undefined && !variant.subgroupMatrix;
  return tiled ? DECODE_SPLIT_MIN_TOKENS_TILED : DECODE_SPLIT_MIN_TOKENS;
}

/**
 * Why the tensor-core decode attention `variant` cannot run here, or null: it needs f16 KV,
 * subgroup matrices, 16-key tiles inside a block and splits of multiples of 16 keys.
 */
function tcDecodeReason(
  gpu: Gpu,
  dtype: StorageDtype,
  blockSize: number,
  minSplitTokens: number,
  variant: string,
): string | null {
  return dtype !== "f16"
    ? "the KV cache is not f16"
    : blockSize % 16 !== 0
    ? `block_size ${blockSize} is not a multiple of 16`
    : minSplitTokens < 16
    ? `splits of at least ${minSplitTokens} keys may not be multiples of 16`
    : unsupportedReason(gpu, variantByName(pagedAttentionDecode.spec, variant));
}

/** The one-key-per-lane decode attention variant this device runs (lanes32, else lanes8). */
function lanesDecodeVariant(gpu: Gpu, dtype: StorageDtype): string {
  const names = [`${dtype}-lanes32`, `${dtype}-lanes8`];
  const runs = names.find((n) =>
    unsupportedReason(gpu, variantByName(pagedAttentionDecode.spec, n)) === null
  );
  if (!runs) {
    throw new ModelOptionError(
      `model: decode attention "lanes" needs subgroups of exactly 8 or 32, laid out as ` +
        `consecutive invocations (have ${gpu.subgroupMinSize}..${gpu.subgroupMaxSize})`,
    );
  }
  return runs;
}

/** A stage of the step whose dispatches go in `times` times (GpuModel.stageEdit). */
export interface StageEdit {
  /** A pass label: `linear qkv`, `moe down`, ... */
  readonly stage: string;
  /** 2: each dispatch twice in a row; 0: none of them. */
  readonly times: 0 | 2;
}

/** One dispatch's GPU time, when the model runs with `profile`. */
export interface KernelSpan {
  readonly label: string;
  readonly kernel: string;
  readonly us: number;
  readonly startUs: number;
}

/**
 * One step's router choices (a debug read-back, see {@link GpuModel.routingObserver}):
 * per MoE layer the top-k expert ids of every token, token-major.
 */
export interface RoutingCapture {
  /** Forward steps this model ran, this one included (1, 2, ...). */
  readonly step: number;
  /** Tokens of the step. */
  readonly tokens: number;
  /** Experts per token. */
  readonly topK: number;
  /** Experts per MoE layer. */
  readonly numExperts: number;
  /** Per MoE layer, in layer order: its index and `[tokens * topK]` expert ids. */
  readonly layers: readonly { readonly layer: number; readonly topkIds: Int32Array }[];
}

type LinearKind = "qkv" | "o" | "router" | "gateUp" | "down" | "lmHead";

/** The form a linear kind runs in this step (GpuModel.setLinear chooses it). */
type LinearForm =
  | { readonly path: "gemv"; readonly variant: string }
  | { readonly path: "gemm"; readonly variant: string }
  | {
    readonly path: "tc";
    readonly variant: string;
    /** The split-K partial sums the GEMM writes (1: unsplit, it writes y itself). */
    readonly splits: number;
    /** Whether cast_f16 writes the f16 copy first (false: an -a32 form reads x itself). */
    readonly cast: boolean;
  };

interface LinearCall {
  readonly gemv: KernelCall<typeof gemv.spec.params.fields>;
  readonly gemm: KernelCall<typeof gemm.spec.params.fields>;
  /** The tensor-core path (f16 copy, then GEMM), where this layer fits it and it is on. */
  readonly tc: {
    readonly cast: KernelCall<typeof castF16.spec.params.fields>;
    readonly gemm: KernelCall<typeof gemmTc.spec.params.fields>;
    readonly reduce: KernelCall<typeof splitkReduce.spec.params.fields>;
  } | null;
  readonly n: number;
  readonly k: number;
  readonly accumulate: boolean;
}

/** What a step needs from the host, packed (exported for tests). */
interface StepPlan {
  readonly tokens: number;
  readonly seqs: number;
  readonly rows: number;
  readonly decode: boolean;
  /** The sampled rows are the step's tokens in order (decode): no gather before the norm. */
  readonly allRows: boolean;
}

const SAMPLE_STAGING = 4;
/** The most split-K parts of the one-row o GEMV (GpuModelOptions.oSplitsOneRow). */
const O_MAX_SPLITS = 16;
/**
 * The one-row o GEMV's split-K parts by default (GpuModelOptions.oSplitsOneRow): unsplit. On the
 * H200 (session 38, perf-decode GPU ms, two processes each) 1 x 1024 read 4.14-4.21 unsplit and
 * 4.27-4.30 in 2 or 4 parts, 4.51-4.56 in 8: the router's reads of the partial sums cost more
 * than the split GEMV saves.
 */
const O_SPLITS_ONE_ROW = 1;
/** Split-K of the tensor-core GEMM: steps of at most these rows, at most these splits. */
export const TC_SPLIT_MAX_ROWS = 128;
export const TC_MAX_SPLITS = 16;
/**
 * Split-K past TC_SPLIT_MAX_ROWS rows, for a layer whose (row, column) tiles leave most of the
 * GPU idle (the router's 128 columns: 16 workgroups of tcp128x128 at 2048 rows took 4.8 ms of
 * the H200's 201 ms 1 x 2048 step): about these many workgroups, splits of at least this k.
 */
const TC_PREFILL_SPLIT_TARGET = 128;
const TC_PREFILL_SPLIT_MIN_K = 256;
/** Rows past which linear layers take GpuModelOptions.tensorCorePrefillWide. */
export const PREFILL_WIDE_ROWS = 256;
/** One entry of GpuModelOptions.lmHeadForms: the LM head's gemm_tc form up to maxRows rows. */
export interface LmHeadForm {
  readonly maxRows: number;
  readonly variant: string;
}

/**
 * GpuModelOptions.lmHeadForms' default. On the H200 (2026-12-02, perf-linear, Qwen3's 151,936 x
 * 2048 LM head, `session24`) the linears' forms read it in 285 µs at 8 rows (f16-tcs16), 313 at
 * 16, 313 at 32 (f16-tcs32x2), 468 at 64 (f16-tcs64x4) and 694 at 128 (f16-tcp128x128); these
 * in 229, 228, 263, 435 and 570 (60%, 60%, 53%, 32% and 24% of the read roof). In the model
 * (one process each): 128 x 1024 32.83 -> 32.71 ms a step, 64 x 1024 27.86 -> 27.83; four
 * later processes with them read 32.75-32.81 at 128 x 1024.
 */
export const LM_HEAD_FORMS: readonly LmHeadForm[] = [
  { maxRows: 16, variant: "f16-tcs16x1w128" },
  { maxRows: 32, variant: "f16-tcs32x2w64" },
  { maxRows: 64, variant: "f16-tcs64x4w128" },
  { maxRows: 128, variant: "f16-tcp128x256" },
];

/**
 * The LM head's own form for `rows` sampled rows: the first entry of `forms` whose maxRows covers
 * them, where it compiled here; else null (the linears' choice takes them).
 */
export function lmHeadFormFor(
  forms: readonly LmHeadForm[],
  rows: number,
  compiled: ReadonlySet<string>,
): string | null {
  const f = forms.find((x) => rows <= x.maxRows);
  return f && compiled.has(f.variant) ? f.variant : null;
}

/** GpuModelOptions.tensorCoreF32InputRows' default. */
export const TC_F32_INPUT_ROWS = 16;
/** GpuModelOptions.tensorCoreSplitTarget's default. */
export const TC_SPLIT_TARGET = 2048;
/**
 * The workgroups a prefill form (gemm_tcp) may take in its k splits up to TC_SPLIT_MAX_ROWS rows
 * (65-128 rows by default): one wave of them: `f16-tcp128x128` appears to hold an SM per
 * workgroup (read from the sweep below, not measured apart) and the H200 has 132 SMs; the staged forms aim at TC_SPLIT_TARGET instead. decodeSplits gives
 * such a form the most splits whose workgroups fit (any count, not only powers of two). H200,
 * perf-linear, `f16-tcp128x128` (2026-12-02, one call): qkv (n 5120, k 2048) at 128 rows 35.3
 * µs a layer in 3 splits (120 workgroups) against 44.3 in 2, 51.5 in 4 (160: a wave and a
 * fifth), 45.4 in 5 and 42.8 in 6, at 96 rows 41.2 against 50.9 in 2; o (n 2048, k 4096) 28.8
 * in 8 (128 workgroups) against 33.2 in 6 and 36.9 in 5; in the model 128 x 1024 decode steps
 * took 33.95 ms with qkv in 3 splits against 34.38 in 2 (the earlier rule: powers of two toward
 * 72 workgroups) and 34.60 in 5. Earlier (2026-12-01, `session16_call8`) qkv read 43.9 µs in 2
 * splits against 51.8 in 4 and in 8, o 29.0 in 8 against 42.7 in 4 and 35.0 in 16.
 */
export const TC_TCP_DECODE_WAVE = 132;

/** A decode step's heads, as its split plan sees them. */
type DecodeHeads = { readonly numQHeads: number; readonly numKvHeads: number };

/**
 * Decode attention's split plan for one step (planDecodeSplits with GpuModelOptions.decodeSplit):
 * about `workgroups` workgroups, or whole waves of `wave`, where asked; by default about
 * DECODE_SPLIT_WORKGROUPS on the FMA forms and whole waves of DECODE_SPLIT_WAVE_TC on the
 * tensor-core forms, or half waves there where that plan's splits reach DECODE_HALF_WAVE_MIN_KEYS
 * keys and its workgroups that hold keys fill a half wave, or where its splits stay under
 * DECODE_HALF_WAVE_SHORT_KEYS keys and the whole-wave plan's workgroups that hold keys overflow a
 * half wave.
 */
export function decodeStepSplits(
  contextLens: readonly number[],
  shape: DecodeHeads,
  variant: Variant,
  split: NonNullable<GpuModelOptions["decodeSplit"]>,
): pagedAttentionDecode.DecodeSplitPlan {
  return decodeStepSplitChoice(contextLens, shape, variant, split).plan;
}

/** decodeStepSplits' plan and the planDecodeSplits target it was planned with. */
export function decodeStepSplitChoice(
  contextLens: readonly number[],
  shape: DecodeHeads,
  variant: Variant,
  split: NonNullable<GpuModelOptions["decodeSplit"]>,
): {
  readonly target: pagedAttentionDecode.DecodeSplitTarget;
  readonly plan: pagedAttentionDecode.DecodeSplitPlan;
} {
  const minTokens = split.minTokens ?? decodeSplitMinTokens(variant);
  const planFor = (target: pagedAttentionDecode.DecodeSplitTarget) => ({
    target,
    plan: pagedAttentionDecode.planDecodeSplits(
      contextLens,
      shape,
      variant,
      target,
      minTokens,
    ),
  });
  if (split.workgroups !== undefined) return planFor(split.workgroups);
  if (split.wave !== undefined) return planFor({ wave: split.wave });
  if (!variant.subgroupMatrix) return planFor(DECODE_SPLIT_WORKGROUPS);
  const half = planFor({ wave: DECODE_SPLIT_WAVE_TC / 2 });
  // the workgroups that hold keys (a short sequence's splits past its context exit at once)
  const busy = (plan: pagedAttentionDecode.DecodeSplitPlan) => {
    let n = 0;
    for (const len of contextLens) {
      n += Math.min(plan.numSplits, Math.ceil(len / plan.splitTokens)) * shape.numKvHeads;
    }
    return n;
  };
  const halfWave = DECODE_SPLIT_WAVE_TC / 2;
  if (half.plan.splitTokens >= DECODE_HALF_WAVE_MIN_KEYS && busy(half.plan) >= halfWave) {
    return half;
  }
  const whole = planFor({ wave: DECODE_SPLIT_WAVE_TC });
  // (not a half wave of one split: a short context across many sequences, not measured)
  return half.plan.numSplits > 1 && half.plan.splitTokens < DECODE_HALF_WAVE_SHORT_KEYS &&
      busy(whole.plan) > halfWave
    ? half
    : whole;
}

/**
 * Split-K of a decode-sized tensor-core linear (at most TC_SPLIT_MAX_ROWS rows): a staged form
 * gemmTcSplits toward `target` workgroups, a prefill form the most splits whose workgroups fit
 * one wave (at most min(target, TC_TCP_DECODE_WAVE)); at most TC_MAX_SPLITS splits, each at
 * least `minK` of k (0: the form's own stagedSplitMinK, times its row blocks where a staged form
 * takes more rows than its own). perf-linear's `auto` is this rule.
 *
 * Row blocks: a staged form past its rows runs a block of workgroups a row tile, each block
 * reading the weights again (mostly from L2), so it takes the splits that one block's count of
 * workgroups would need once per block. On the H200 (session 45 `call6`, perf-linear, 48 layers
 * of weights) `f16-tcs64x4` at 72 / 96 / 128 rows took qkv (k 2048) in 35.0 / 35.1 / 35.1 µs
 * unsplit against 36.4 / 37.0 / 38.6 in 2 splits of 1024, and o (k 4096) in 30.8 / 31.0 / 31.2 in
 * 2 splits of 2048 against 35.3 / 34.6 / 33.8 in 4 of 1024; at its own 48-64 rows 2 and 4 splits
 * of 1024 stay the fastest (session 44 `call3`: qkv 21.8-22.5 µs against 28.1-28.5 unsplit, o
 * 19.0-19.5 against 28.2-28.5 in 2).
 */
export function decodeSplits(
  rows: number,
  n: number,
  k: number,
  variant: Variant,
  target = TC_SPLIT_TARGET,
  minK = 0,
): number {
  const tcp = gemmTc.isPrefillForm(variant);
  // the form's row tiles: a staged form's row blocks past its own rows
  const rowTiles = Math.max(1, Math.ceil(rows / (variant.consts?.TM ?? rows)));
  const leastK = minK || gemmTc.stagedSplitMinK(variant) * (tcp ? 1 : rowTiles);
  if (tcp) {
    const tiles = Math.ceil(n / variant.consts!.CW) * rowTiles;
    const step = gemmTc.gemmTcKStep(variant);
    let s = Math.min(TC_MAX_SPLITS, Math.floor(Math.min(target, TC_TCP_DECODE_WAVE) / tiles));
    // each split at least leastK of k, and s splits of k_split each cover k (none left empty)
    const fits = (c: number) => {
      const kSplit = gemmTc.gemmTcSplitK(k, c, step);
      return kSplit >= leastK && Math.ceil(k / kSplit) === c;
    };
    while (s > 1 && !fits(s)) s--;
    return Math.max(1, s);
  }
  return gemmTc.gemmTcSplits(
    rows,
    n,
    k,
    variant,
    target,
    TC_MAX_SPLITS,
    variant.wideWords ? leastK / 16 : undefined,
  );
}

/**
 * Split-K of a prefill-sized tensor-core linear: gemmTcSplits toward TC_PREFILL_SPLIT_TARGET
 * workgroups with splits of at least TC_PREFILL_SPLIT_MIN_K, halved until the partial sums
 * (splits x rows x n f32) fit the `capacity` floats of the partials buffer (exported for tests).
 */
export function prefillSplits(
  rows: number,
  n: number,
  k: number,
  variant: Variant,
  capacity: number,
): number {
  let s = gemmTc.gemmTcSplits(
    rows,
    n,
    k,
    variant,
    TC_PREFILL_SPLIT_TARGET,
    TC_MAX_SPLITS,
    TC_PREFILL_SPLIT_MIN_K / 16,
  );
  while (s > 1 && s * rows * n > capacity) s /= 2;
  return s;
}

export class GpuModel implements ForwardModel {
  readonly blockSize: number;
  readonly numBlocks: number;
  readonly vocabSize: number;
  readonly maxModelLen: number;
  readonly eosTokenIds: readonly number[];
  readonly maxNumTokens: number;
  readonly maxNumSeqs: number;
  /** Most rows whose logits one step can return (binding limit of the logits buffer). */
  readonly maxLogitRows: number;

  private stepIndex = 0;
  private encodeMs = 0;
  private encodeParts = { inputsMs: 0, beginMs: 0, submitMs: 0, forwardMs: 0 };
  private submits = 0;
  private decodeSplitOfStep: DecodeSplitOfStep | null = null;
  /** Steps submitted whose sampled tokens have not arrived yet. */
  private stepsInFlight = 0;
  /** Steps prepare() encoded, and those of them launched (they launch in order). */
  private prepared = 0;
  private launched = 0;
  /** Buffers replaced while prepared steps waited (retire). */
  private readonly retired: GPUBuffer[] = [];
  /** Each linear kind's form in the step being encoded (setLinear). */
  private readonly linearForms = {} as Record<LinearKind, LinearForm>;
  private readonly timer: PassTimer;
  private readonly sampleStaging: GPUBuffer[] = [];
  private partials: { o: GPUBuffer; lse: GPUBuffer; elements: number } | null = null;
  /** Spans of the last profiled step. */
  private spans: Promise<KernelSpan[]> | null = null;
  private oSplitsOfStep = 1;
  /**
   * The pass labels the last step asked for, one a dispatch (lastStepStageUses counts them);
   * null where it did not record them (countStages off).
   */
  private stageLabelsOfStep: readonly string[] | null = null;
  /** The layer of each of stageLabelsOfStep (null: outside the layers). */
  private stageLayersOfStep: readonly (number | null)[] | null = null;
  /**
   * Record the pass labels of the following steps (lastStepStageUses; perf-decode
   * --stage-costs). Off, a step's encoding records nothing a dispatch.
   */
  countStages = false;
  /** Time every dispatch of the following steps in its own pass (slower; for profiles). */
  profile: boolean;
  /**
   * Issue each dispatch of this stage (a pass label: `linear qkv`, `moe down`, ...) `times`
   * times in the following steps: 2, twice; 0, not at all (perf-decode --stage-costs; null:
   * each once). A stage that adds to what it reads (the residual) adds twice, or not at all:
   * its outputs differ, and with them the later stages' values, not their work.
   */
  stageEdit: StageEdit | null = null;
  /**
   * Debug: when set, every step copies each MoE layer's top-k expert ids out of the GPU
   * (the step's compute pass is split after each MoE layer for the copy) and calls this
   * with them once they arrive. Off (null) when measuring.
   */
  routingObserver: ((capture: RoutingCapture) => void) | null = null;
  private routingStep: { buffer: GPUBuffer; moeIndex: number; tokens: number } | null = null;

  private constructor(
    private readonly gpu: Gpu,
    readonly config: ModelConfig,
    readonly weights: GpuWeights,
    readonly kv: KvBuffers,
    private readonly opts: Required<Omit<GpuModelOptions, "numBlocks" | "kvCacheBytes">>,
    private readonly calls: Awaited<ReturnType<typeof createCalls>>,
    private readonly moe: MoeBlock | null,
    private readonly buf: ReturnType<typeof createScratch>,
  ) {
    this.blockSize = kv.blockSize;
    this.numBlocks = kv.numBlocks;
    this.vocabSize = config.vocabSize;
    this.maxModelLen = opts.maxModelLen;
    this.eosTokenIds = config.eosTokenIds;
    this.maxNumTokens = opts.maxNumTokens;
    this.maxNumSeqs = opts.maxNumSeqs;
    this.maxLogitRows = buf.maxRows;
    this.timer = new PassTimer(gpu, MAX_TIMED_PASSES);
    this.profile = opts.profile;
  }

  /** Loads `dir` (a Hugging Face checkpoint folder) or `synthetic:NAME`. */
  static async load(
    gpu: Gpu,
    spec: string,
    options: GpuModelOptions = {},
    onProgress?: (message: string) => void,
  ): Promise<GpuModel> {
    const config = resolveModelConfig(spec);
    const dtype = options.dtype ?? (gpu.f16 ? "f16" : "f32");
    if (dtype === "f16" && !gpu.f16) {
      throw new ModelOptionError("dtype f16 asked for, but the adapter has no shader-f16");
    }
    const hasMoe = config.layerKinds.includes("moe");
    const expertTiles = options.moeExpertTiles ??
      (hasMoe && expertTilesByDefault(gpu, config, dtype));
    if (expertTiles && !hasMoe) {
      throw new ModelOptionError(
        `moeExpertTiles: ${config.name} has no MoE layers (no expert weights)`,
      );
    }
    const placement = checkPlacement("weightPlacement", options.weightPlacement, "arena");
    checkPlacement("kvPlacement", options.kvPlacement);
    const t0 = performance.now();
    let weights: GpuWeights;
    if (config.synthetic) {
      onProgress?.(`drawing ${config.name} weights on the GPU (${dtype})`);
      weights = await GpuWeights.synthetic(gpu, config, dtype, { expertTiles, placement });
    } else {
      onProgress?.(`loading ${spec} (${dtype})`);
      const ckpt = Checkpoint.open(spec);
      try {
        weights = await GpuWeights.fromCheckpoint(gpu, config, ckpt, dtype, {
          expertTiles,
          placement,
        });
      } finally {
        ckpt.close();
      }
      if (weights.f16Overflow.count > 0) {
        onProgress?.(
          `warning: ${weights.f16Overflow.count} weight values overflow f16 (largest |x| ${weights.f16Overflow.maxAbs}); they are stored as inf`,
        );
      }
    }
    onProgress?.(
      `weights: ${(weights.bytes / 2 ** 30).toFixed(2)} GiB in ${
        ((performance.now() - t0) / 1000).toFixed(1)
      } s${weights.expertTiles ? " (expert weights in 16 x 64 tiles)" : ""}${
        weights.placement === "arena"
          ? ` (in ${weights.bufferCount} arena buffer${weights.bufferCount === 1 ? "" : "s"})`
          : ""
      }`,
    );
    try {
      return await GpuModel.create(gpu, config, weights, options);
    } catch (err) {
      // (the KV cache or a pipeline failed: the weights go with it)
      weights.destroy();
      throw err;
    }
  }

  /** Builds the model around loaded weights: KV cache, pipelines, scratch. */
  static async create(
    gpu: Gpu,
    config: ModelConfig,
    weights: GpuWeights,
    options: GpuModelOptions = {},
  ): Promise<GpuModel> {
    const dtype = weights.dtype;
    const blockSize = options.blockSize ?? 16;
    const cpu = gpu.adapter.type === "cpu";
    // The GEMV's decode forms need subgroups of 8 or more (lane groups of 8).
    const decodeRuns = unsupportedReason(gpu, variantByName(gemv.spec, `${dtype}-dec`)) === null;
    const gemvForms = options.gemvForms ?? (cpu ? "rows" : decodeRuns ? "decode" : "classic");
    if (gemvForms === "decode" && !decodeRuns) {
      throw new ModelOptionError(
        `model: gemvForms "decode" needs subgroups of 8 or more on this adapter`,
      );
    }
    const decodeForms = gemvForms === "decode";
    const rowForms = decodeForms ? defaultRowForms(gpu, dtype) : null;
    const kvBytes = options.kvCacheBytes ?? (cpu ? 256 * 2 ** 20 : 16 * 2 ** 30);
    const maxModelLen = options.maxModelLen ?? config.maxPositionEmbeddings;
    if (maxModelLen > config.maxPositionEmbeddings) {
      throw new ModelOptionError(
        `max model length ${maxModelLen} exceeds the model's max_position_embeddings ${config.maxPositionEmbeddings}`,
      );
    }
    const perBlock = kvBlockBytes(config, dtype, blockSize);
    const perLayerLimit = Math.floor(
      gpu.limits.maxStorageBufferBindingSize / (perBlock / (2 * config.numLayers)),
    );
    const numBlocks = options.numBlocks ??
      Math.max(2, Math.min(perLayerLimit, Math.floor(kvBytes / perBlock)));
    const kv = await KvBuffers.allocate(
      gpu,
      config,
      dtype,
      { blockSize, numBlocks },
      checkPlacement("kvPlacement", options.kvPlacement),
    );
    // everything after the KV cache frees it if it fails (the caller frees the weights)
    try {
      const opts = {
        dtype,
        blockSize,
        maxNumTokens: options.maxNumTokens ?? defaultMaxNumTokens(gpu),
        maxNumSeqs: options.maxNumSeqs ?? (cpu ? 32 : 256),
        maxModelLen,
        profile: options.profile ?? false,
        gemvMaxRows: options.gemvMaxRows ?? (cpu ? 64 : decodeForms ? 1 : 8),
        gemvForms,
        decodeAttention: options.decodeAttention ?? (cpu ? "direct" : "tiled"),
        prefillAttention: prefillAttentionForm(
          gpu,
          config,
          dtype,
          blockSize,
          options.prefillAttention,
        ),
        stagedMaxRows: options.stagedMaxRows ?? (cpu ? 0 : 128),
        gemmSmallMaxRows: options.gemmSmallMaxRows ?? 384,
        tensorCoreRows: options.tensorCoreRows ?? defaultTensorCoreRows(gpu, dtype),
        tensorCoreTile: options.tensorCoreTile ?? 0,
        tensorCoreDecodeRows: Math.min(options.tensorCoreDecodeRows ?? 128, TC_SPLIT_MAX_ROWS),
        tensorCoreDecodeSubgroups: options.tensorCoreDecodeSubgroups ?? "rows",
        tensorCorePrefill: options.tensorCorePrefill ?? "tcp128x128",
        tensorCorePrefillWide: options.tensorCorePrefillWide ?? "tcp256x128",
        lmHeadForms: options.lmHeadForms ?? LM_HEAD_FORMS,
        tensorCoreSplitMinK: splitMinK(options.tensorCoreSplitMinK),
        tensorCoreSplitTarget: options.tensorCoreSplitTarget ?? TC_SPLIT_TARGET,
        tensorCoreF32InputRows: options.tensorCoreF32InputRows ?? TC_F32_INPUT_ROWS,
        moeTensorCoreRows: options.moeTensorCoreRows ?? MOE_TC_ROWS_PER_EXPERT,
        moeTensorCoreDecodeRows: options.moeTensorCoreDecodeRows ?? MOE_TCS_ROWS_PER_EXPERT,
        moeFusedRouterTokens: options.moeFusedRouterTokens ?? MOE_FUSED_ROUTER_MAX_TOKENS,
        moeFusedRouterMinTokens: options.moeFusedRouterMinTokens ?? MOE_FUSED_ROUTER_MIN_TOKENS,
        moeRouteDispatchTokens: options.moeRouteDispatchTokens ?? MOE_ROUTE_DISPATCH_MAX_TOKENS,
        moeRoutedGateUp: options.moeRoutedGateUp ?? true,
        moeSplitRouterTokens: options.moeSplitRouterTokens ?? MOE_SPLIT_ROUTER_MAX_TOKENS,
        moeSplitRouterMinTokens: options.moeSplitRouterMinTokens ?? MOE_SPLIT_ROUTER_MIN_TOKENS,
        qkvPartialsInRope: options.qkvPartialsInRope ?? true,
        oPartialsInRouter: options.oPartialsInRouter ?? true,
        qkInDecodeAttention: options.qkInDecodeAttention ?? true,
        combineNormF16: options.combineNormF16 ?? true,
        mergeF16: options.mergeF16 ?? true,
        prefillQF16: options.prefillQF16 ?? true,
        qkNormPairs: options.qkNormPairs ?? 1,
        fuseCombineNorm: options.fuseCombineNorm ?? true,
        qkvNormInGemv: options.qkvNormInGemv ?? true,
        qkvScaledAfterMoe: options.qkvScaledAfterMoe ?? true,
        oSplitsOneRow: options.oSplitsOneRow ?? O_SPLITS_ONE_ROW,
        moeDownCombineTokens: options.moeDownCombineTokens ?? MOE_DOWN_COMBINE_MAX_TOKENS,
        moeDownCombineForm: options.moeDownCombineForm ?? "",
        moeRouterNorm: options.moeRouterNorm ?? true,
        moeTensorCorePrefill: options.moeTensorCorePrefill ?? "tcp4x2",
        moeDownRowsF16: options.moeDownRowsF16 ?? true,
        moeExpertTiles: weights.expertTiles,
        weightPlacement: weights.placement,
        kvPlacement: kv.placement,
        packedF16: dtype === "f16" &&
          (options.packedF16 ?? process.env.WEBFPM_F16_PACKED === "1"),
        submitLayers: submitLayers(options.submitLayers),
        linearFewRows: options.linearFewRows ?? rowForms?.few ?? "",
        linearOneRow: options.linearOneRow ?? "",
        linearManyRows: options.linearManyRows ?? "staged",
        // the defaults, then what the caller names (a kind it leaves out keeps its default)
        manyRowsByKind: { ...rowForms?.byKind, ...options.manyRowsByKind },
        moeDecodeForms: options.moeDecodeForms ?? {},
        decodeSplit: {
          workgroups: options.decodeSplit?.workgroups,
          wave: options.decodeSplit?.wave,
          // (undefined: each form's own, decodeSplitMinTokens)
          minTokens: options.decodeSplit?.minTokens,
        },
      };
      for (const option of ["linearFewRows", "linearOneRow"] as const) {
        if (options[option] && !decodeForms) {
          throw new ModelOptionError(
            `model: ${option} needs the decode GEMV forms (gemvForms "decode")`,
          );
        }
      }
      checkDecodeSplit(opts.decodeSplit);
      if (
        !Number.isInteger(opts.oSplitsOneRow) || opts.oSplitsOneRow < 1 ||
        opts.oSplitsOneRow > O_MAX_SPLITS
      ) {
        throw new ModelOptionError(
          `model: oSplitsOneRow ${opts.oSplitsOneRow} must be an integer in 1..${O_MAX_SPLITS}`,
        );
      }
      if (!Number.isInteger(opts.moeFusedRouterMinTokens) || opts.moeFusedRouterMinTokens < 1) {
        throw new ModelOptionError(
          `model: moeFusedRouterMinTokens ${opts.moeFusedRouterMinTokens} must be a positive integer`,
        );
      }
      // the step's calls and the MoE block compile concurrently (a driver may compile in parallel)
      const callsBuilt = createCalls(
        gpu,
        config,
        dtype,
        opts.decodeAttention,
        opts.prefillAttention,
        opts.packedF16,
        gemvForms,
        {
          one: opts.linearOneRow,
          few: opts.linearFewRows,
          many: opts.linearManyRows,
          byKind: opts.manyRowsByKind,
        },
        opts.tensorCoreRows > 0,
        opts.tensorCoreDecodeRows,
        [opts.tensorCorePrefill, opts.tensorCorePrefillWide],
        opts.lmHeadForms.map((f) => f.variant),
        opts.tensorCoreF32InputRows > 0,
        blockSize,
        opts.decodeSplit.minTokens ?? DECODE_SPLIT_MIN_TOKENS,
        options.decodeAttention === undefined,
        opts.qkInDecodeAttention,
        opts.qkvNormInGemv,
        opts.qkvScaledAfterMoe,
        opts.prefillQF16,
        opts.qkNormPairs,
      );
      const moeBuilt = config.layerKinds.includes("moe")
        ? MoeBlock.create(gpu, {
          hidden: config.hiddenSize,
          inter: config.moeIntermediateSize,
          experts: config.numExperts,
          topK: config.numExpertsPerTok,
          normTopk: config.normTopkProb,
          maxTokens: opts.maxNumTokens,
          dtype,
          rmsNormEps: config.rmsNormEps,
          expertTiles: weights.expertTiles,
        }, {
          packedF16: opts.packedF16,
          decodeForms: opts.moeDecodeForms,
          tensorCoreRowsPerExpert: opts.moeTensorCoreRows,
          tensorCoreDecodeRowsPerExpert: opts.moeTensorCoreDecodeRows,
          fusedRouterMaxTokens: opts.moeFusedRouterTokens,
          fusedRouterMinTokens: opts.moeFusedRouterMinTokens,
          fusedRouterNorm: opts.moeRouterNorm,
          routeDispatchMaxTokens: opts.moeRouteDispatchTokens,
          routedGateUp: opts.moeRoutedGateUp,
          downCombineMaxTokens: opts.moeDownCombineTokens,
          downCombineForm: opts.moeDownCombineForm || undefined,
          splitRouterMaxTokens: opts.moeSplitRouterTokens,
          splitRouterMinTokens: opts.moeSplitRouterMinTokens,
          tensorCorePrefill: `f16-${opts.moeTensorCorePrefill}`,
          downRowsF16: opts.moeDownRowsF16,
        })
        : Promise.resolve(null);
      const [callsDone, moeDone] = await Promise.allSettled([callsBuilt, moeBuilt]);
      if (callsDone.status === "rejected") {
        if (moeDone.status === "fulfilled") moeDone.value?.destroy();
        throw callsDone.reason;
      }
      if (moeDone.status === "rejected") {
        for (const c of callsDone.value.all) c.destroy();
        throw moeDone.reason;
      }
      const calls = callsDone.value;
      const moe = moeDone.value;
      let buf: ReturnType<typeof createScratch>;
      try {
        buf = createScratch(gpu, config, opts, calls.tensorCoreK, calls.tensorCoreSplitN);
      } catch (err) {
        for (const c of calls.all) c.destroy();
        moe?.destroy();
        throw err;
      }
      const model = new GpuModel(gpu, config, weights, kv, opts, calls, moe, buf);
      model.ensurePartials(opts.maxNumSeqs * config.numHeads * 4);
      return model;
    } catch (err) {
      kv.destroy();
      throw err;
    }
  }

  /** Runs one step; returns at once (the promises settle when the GPU is done). */
  forward(batch: StepBatch): StepOutput {
    if (this.prepared !== this.launched) {
      throw new Error("forward: a prepared step has not been launched yet");
    }
    return this.encode(batch, false)([]);
  }

  /**
   * Encodes a step in one submit without submitting it, its writes held (ForwardModel.prepare):
   * the benchmark encodes its first timed step before the admission ahead of it starts, so
   * that the host is idle when the admission's output arrives.
   */
  prepare(batch: StepBatch): PreparedStep {
    const [launch, writes] = holdWrites(this.gpu.device, () => this.encode(batch, true));
    const ticket = this.prepared++;
    return {
      launch: () => {
        if (ticket !== this.launched) {
          throw new Error(
            `launch: prepared step ${ticket} launched before step ${this.launched} ahead of it`,
          );
        }
        this.launched++;
        return launch(writes);
      },
    };
  }

  /**
   * Encodes a step; the function it returns makes the writes held while it encoded (`held`:
   * the caller held them) and submits. Unheld, a step may submit its first layers in groups
   * while it encodes the rest.
   */
  private encode(batch: StepBatch, held: boolean): (writes: readonly HeldWrite[]) => StepOutput {
    const t0 = performance.now();
    const plan = this.plan(batch);
    const tInputs = performance.now();
    this.writeInputs(batch, plan);
    const first = this.gpu.device.createCommandEncoder({ label: `step ${this.stepIndex + 1}` });
    const inputsMs = performance.now() - tInputs;
    if (batch.blockZeros?.length) this.encodeBlockZeros(first, batch.blockZeros);
    // the step's parity only once nothing above refused it: a refused step takes none, so the
    // next one reads the sampled ids of the step before it
    const parity = this.stepIndex++ % 2;
    const stepIndex = this.stepIndex;
    const routing = this.beginRoutingCapture(plan.tokens);
    const observer = this.routingObserver;
    const step = new StepPasses(
      this.gpu.device,
      first,
      this.timer,
      this.profile,
      this.profile ? null : this.stageEdit,
      this.countStages,
    );
    // Submitting in groups pays where the GPU would wait for this step's one submit: a step
    // with prefill tokens, or any step while none is in flight. Behind a step in flight the
    // GPU is busy, and each submit costs host time. A step the caller wants in one submit
    // (StepBatch.oneSubmit), or one encoded ahead of its submit, takes one.
    const groups = !held && !batch.oneSubmit && (!plan.decode || this.stepsInFlight === 0);
    this.encodeStep(step, batch, plan, parity, groups ? this.opts.submitLayers : 0);
    this.routingStep = null;
    step.end();
    this.stageLabelsOfStep = this.countStages ? step.stageLabels : null;
    this.stageLayersOfStep = this.countStages ? step.stageLayers : null;
    const enc = step.encoder;
    const rows = plan.rows;
    const staging = this.sampleStaging.pop() ?? this.gpu.device.createBuffer({
      label: "sampled staging",
      size: Math.max(16, this.buf.maxRows * 4),
      usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
    });
    enc.copyBufferToBuffer(this.buf.sampled[parity], 0, staging, 0, Math.max(4, rows * 4));
    let logitsStaging: GPUBuffer | null = null;
    if (batch.logits) {
      const bytes = rows * this.vocabSize * 4;
      logitsStaging = this.gpu.device.createBuffer({
        label: "logits staging",
        size: Math.max(16, Math.ceil(bytes / 4) * 4),
        usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
      });
      enc.copyBufferToBuffer(this.buf.logits, 0, logitsStaging, 0, Math.max(4, bytes));
    }
    this.timer.resolve(enc);
    const commands = enc.finish();
    const encodeMs = performance.now() - t0;
    const labels = step.labels;
    const profiled = this.profile;
    return (writes: readonly HeldWrite[]): StepOutput => {
      const tLaunch = performance.now();
      this.encodeMs = encodeMs;
      makeWrites(this.gpu.device, writes);
      const tSubmit = performance.now();
      this.gpu.device.queue.submit([commands]);
      const submitMs = performance.now() - tSubmit;
      if (this.retired.length > 0 && this.prepared === this.launched) this.destroyRetired();
      this.submits = step.submits + 1;
      if (routing && observer) this.finishRoutingCapture(routing, plan.tokens, stepIndex, observer);
      const timing = this.timer.read(); // PassTimer.read paces its own wait
      if (profiled) {
        this.spans = timing.then((spans) =>
          spans.map((s, i) => ({ ...s, kernel: labels[i]?.kernel ?? s.label }))
        );
      }
      this.stepsInFlight++;
      const sampled = paced(staging.mapAsync(MapMode.READ)).finally(() => this.stepsInFlight--)
        .then(() => {
          const out = new Int32Array(
            staging.getMappedRange(0, Math.max(4, rows * 4)).slice(0, rows * 4),
          );
          staging.unmap();
          if (this.sampleStaging.length < SAMPLE_STAGING) this.sampleStaging.push(staging);
          else staging.destroy();
          return out;
        });
      const logits = logitsStaging
        ? paced(logitsStaging.mapAsync(MapMode.READ)).then(() => {
          const out = new Float32Array(
            logitsStaging!.getMappedRange().slice(0, rows * this.vocabSize * 4),
          );
          logitsStaging!.destroy();
          return out;
        })
        : undefined;
      // the sum of the passes' spans: one pass a submit (or a dispatch, profiled), so a gap
      // where the GPU waited for the host's next submit is not GPU time
      const gpuMs = timing.then((spans) =>
        spans.length === 0 ? null : spans.reduce((s, x) => s + x.us, 0) / 1000
      );
      this.encodeParts = {
        inputsMs,
        beginMs: step.beginMs,
        submitMs,
        forwardMs: encodeMs + performance.now() - tLaunch,
      };
      return { sampled, logits, gpuMs, submitCallMs: step.submitMs + submitMs };
    };
  }

  /**
   * Host ms the last forward() spent before its last submit: planning, writing the step's inputs
   * and encoding every dispatch (a step's host work beside the engine's scheduling).
   */
  get lastEncodeMs(): number {
    return this.encodeMs;
  }

  /**
   * Two parts of lastEncodeMs that are Dawn calls which may wait on the device rather than
   * host work: writing the step's inputs (queue writes) with its command encoder's creation,
   * and beginning its compute passes (on lavapipe, whose GPU work shares the CPU, a pass's
   * begin waited up to 6 ms behind the step in flight); and two host times past it: the last
   * submit (Dawn records the step's Vulkan commands there) and the whole forward() call
   * (encoding, submits, and the readbacks' requests).
   */
  get lastEncodeParts(): {
    readonly inputsMs: number;
    readonly beginMs: number;
    readonly submitMs: number;
    readonly forwardMs: number;
  } {
    return this.encodeParts;
  }

  /** Submits the last forward() made (1, or more where it submitted its layers in groups). */
  get lastStepSubmits(): number {
    return this.submits;
  }

  /** Bytes and FLOPs of a step of this shape by label, with the fused forms it takes here. */
  stepCost(shape: StepShape): StepCost {
    const tokens = shape.seqs.reduce((s, q) => s + q.queryLen, 0);
    return stepCost(this.config, this.weights.dtype, shape, this.stepForms(tokens));
  }

  /** The fused forms a step of `tokens` tokens takes (they move costs between labels). */
  private stepForms(tokens: number): StepForms {
    // (setLinear's choice for qkv: the tensor cores first, then the GEMV forms)
    const qkvNorm = this.calls.qkvNorm !== null && this.tensorCoreFor("qkv", tokens) === null &&
      this.gemvFor("qkv", tokens) === this.calls.gemvVariant;
    return {
      routerInOnePass: this.moe?.routesInOnePassAt(tokens) ?? false,
      routerNorm: this.moe?.normsInRouterAt(tokens) ?? false,
      routeDispatch: this.moe?.routesAndDispatchesAt(tokens) ?? false,
      combineNorm: this.moe !== null && this.opts.fuseCombineNorm,
      qkvNorm,
      downCombine: qkvNorm && (this.moe?.combinesInDownAt(tokens) ?? false),
    };
  }

  /**
   * The last step's decode attention: its variant and split plan (keys a split x splits); null
   * when that step was no decode step.
   */
  get lastDecodeSplit(): DecodeSplitOfStep | null {
    return this.decodeSplitOfStep;
  }

  /** The split-K parts of the MoE layers' o GEMV in the last step (1: unsplit; oSplitsOneRow). */
  get lastOSplits(): number {
    return this.oSplitsOfStep;
  }

  /** The MoE block's grouped-GEMM variant in the last step (null without MoE layers). */
  get moeGemmVariant(): string | null {
    return this.moe?.gemmVariant ?? null;
  }

  /** The linear-layer and attention kernel variants chosen for this device. */
  get linearVariants(): {
    gemv: string;
    gemm: string;
    decodeAttention: string;
    prefillAttention: string;
  } {
    return {
      gemv: `${this.calls.gemvVariant} (up to ${this.opts.gemvMaxRows} rows${
        this.calls.fewRowsVariant
          ? `, ${this.calls.fewRowsVariant} up to ${
            Math.min(this.calls.fewRows, this.opts.stagedMaxRows)
          }`
          : ""
      }, then ${this.calls.stagedVariant ?? "the GEMM"} up to ${this.opts.stagedMaxRows}${
        Object.entries(this.opts.manyRowsByKind).map(([k, f]) => `; ${k} ${f} there`).join("")
      }${
        this.moe?.routesInOnePassAt(this.opts.moeFusedRouterMinTokens)
          ? `; the MoE router in one pass, ${
            this.moe.normsInRouterAt(this.opts.moeFusedRouterMinTokens)
              ? "moe_router_norm (with its input RMSNorm)"
              : "moe_router_fused"
          }, at ${this.opts.moeFusedRouterMinTokens}-${this.opts.moeFusedRouterTokens} tokens`
          : ""
      }${
        this.moe?.splitsRouterAt(this.opts.moeSplitRouterMinTokens)
          ? `; the MoE router's input RMSNorm and logits over the GPU, moe_router_logits ${this.moe.splitRouterForm}, at ${this.opts.moeSplitRouterMinTokens}-${this.opts.moeSplitRouterTokens} tokens`
          : ""
      }${
        this.moe?.routesAndDispatchesAt(1)
          ? `; routing and dispatch in one workgroup, moe_route_dispatch, at 1-${this.opts.moeRouteDispatchTokens} tokens${
            this.moe.routesInGateUpAt(1)
              ? " (at 1 token in the gate/up GEMM instead, moe_gemm_gate_up_routed)"
              : ""
          }`
          : ""
      }${
        this.moe?.combinesInDownAt(1) && this.calls.qkvNorm
          ? `; at 1 token the combine in the down GEMM, moe_gemm_down_combine, and the qkv GEMV ` +
            `norming its input, gemv_norm${
              this.calls.qkvScaled && this.moe.leavesNextInputAt(1)
                ? " (gemv_scaled after a MoE layer)"
                : ""
            }`
          : ""
      })`,
      gemm:
        `${this.calls.gemmVariant} (${this.calls.gemmSmallVariant} up to ${this.opts.gemmSmallMaxRows} rows)${
          this.opts.tensorCoreRows > 0
            ? `; from ${this.opts.tensorCoreRows} rows the tensor cores (gemm_tc, ${
              this.opts.tensorCoreTile ? `${this.opts.tensorCoreTile}-row tiles` : "tile by rows"
            }${
              [...this.calls.stagedTc].some((n) => n.startsWith("f16-tcs"))
                ? `; staged f16-tcs up to ${this.opts.tensorCoreDecodeRows} rows where k fits`
                : ""
            }${
              this.calls.stagedTc.has(`f16-${this.opts.tensorCorePrefill}`) &&
                !this.opts.tensorCoreTile
                ? `; f16-${this.opts.tensorCorePrefill} past them where k fits`
                : ""
            }${
              this.opts.lmHeadForms.filter((f) => this.calls.stagedTc.has(f.variant)).map((f) =>
                `; the LM head ${f.variant} up to ${f.maxRows} rows`
              ).join("")
            }${
              this.calls.stagedTc.has(`f16-${this.opts.tensorCorePrefillWide}`) &&
                !this.opts.tensorCoreTile
                ? `; f16-${this.opts.tensorCorePrefillWide} past ${PREFILL_WIDE_ROWS} rows`
                : ""
            }) where n and k fit`
            : ""
        }`,
      decodeAttention: `${this.calls.decodeVariant}${
        this.calls.decodeDeepVariant === this.calls.decodeVariant
          ? ""
          : ` (${this.calls.decodeDeepVariant} from ${DEEP_DECODE_KEYS} keys a step)`
      } (splits for ${
        this.opts.decodeSplit.workgroups !== undefined
          ? `~${this.opts.decodeSplit.workgroups} workgroups`
          : this.opts.decodeSplit.wave !== undefined
          ? `whole waves of ${this.opts.decodeSplit.wave} workgroups`
          : `whole waves of ${DECODE_SPLIT_WAVE_TC} workgroups (tensor cores; half waves where their splits reach ${DECODE_HALF_WAVE_MIN_KEYS} keys) / ~${DECODE_SPLIT_WORKGROUPS}`
      }, >= ${
        this.opts.decodeSplit.minTokens ??
          `${DECODE_SPLIT_MIN_TOKENS_TILED} (tiled) / ${DECODE_SPLIT_MIN_TOKENS}`
      } keys)${
        this.calls.decodeQk
          ? `; q/k norm, RoPE and the KV write inside ${this.calls.decodeQk.variants.join(", ")}`
          : ""
      }`,
      prefillAttention: `${this.calls.prefill.spec.name} ${this.calls.prefillVariant}${
        this.opts.prefillQF16 && this.calls.prefillVariantQ
          ? ` (q as f16: ${this.calls.prefillVariantQ})`
          : ""
      }${
        this.calls.qkNormVariant === this.opts.dtype
          ? ""
          : `; its q/k norm qk_norm_rope_cache ${this.calls.qkNormVariant}`
      }`,
    };
  }

  /** Zeroes the K and V of `blocks` in every layer (before anything in the step reads them). */
  private encodeBlockZeros(enc: GPUCommandEncoder, blocks: readonly number[]): void {
    const bytes = kvBlockBytes(this.config, this.opts.dtype, this.blockSize) /
      (2 * this.config.numLayers);
    for (const block of blocks) {
      if (!Number.isInteger(block) || block < 1 || block >= this.numBlocks) {
        throw new Error(`forward: block ${block} to zero-fill is outside 1..${this.numBlocks - 1}`);
      }
      for (const layer of this.kv.layers) {
        enc.clearBuffer(layer.k.buffer, layer.k.offset + block * bytes, bytes);
        enc.clearBuffer(layer.v.buffer, layer.v.offset + block * bytes, bytes);
      }
    }
  }

  private beginRoutingCapture(tokens: number): GPUBuffer | null {
    if (!this.routingObserver || !this.moe) return null;
    const moeLayers = this.config.layerKinds.filter((k) => k === "moe").length;
    const buffer = this.gpu.device.createBuffer({
      label: "routing capture",
      size: Math.max(16, moeLayers * tokens * this.config.numExpertsPerTok * 4),
      usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
    });
    this.routingStep = { buffer, moeIndex: 0, tokens };
    return buffer;
  }

  /** Hands the step's routing to the observer set when it was encoded. */
  private finishRoutingCapture(
    buffer: GPUBuffer,
    tokens: number,
    step: number,
    observer: (capture: RoutingCapture) => void,
  ): void {
    const k = this.config.numExpertsPerTok;
    const moeLayers = this.config.layerKinds.flatMap((kind, l) => (kind === "moe" ? [l] : []));
    paced(buffer.mapAsync(MapMode.READ)).then(() => {
      const all = new Int32Array(buffer.getMappedRange().slice(0));
      buffer.destroy();
      observer({
        step,
        tokens,
        topK: k,
        numExperts: this.config.numExperts,
        layers: moeLayers.map((layer, i) => ({
          layer,
          topkIds: all.slice(i * tokens * k, (i + 1) * tokens * k),
        })),
      });
    }).catch((err) => {
      // a failed read-back or an observer that throws: said, not an unhandled rejection
      buffer.destroy();
      console.error(`routing capture of step ${step}: ${(err as Error).message}`);
    });
  }

  /**
   * The stages (pass labels) the last step encoded, in order of first use, with the passes
   * asked for under each (a dispatch each, or a few for the MoE stages).
   */
  get lastStepStageUses(): ReadonlyMap<string, number> {
    if (!this.stageLabelsOfStep) {
      throw new Error(
        "lastStepStageUses: the last step recorded no stages (set countStages first)",
      );
    }
    const uses = new Map<string, number>();
    for (const label of this.stageLabelsOfStep) uses.set(label, (uses.get(label) ?? 0) + 1);
    return uses;
  }

  /**
   * The layers each stage of the last step ran in: how many distinct ones, or null for a stage
   * with a pass outside the layers (the embedding, the final norm, the LM head, or `rmsnorm`,
   * which is also the final norm's label).
   */
  get lastStepStageLayers(): ReadonlyMap<string, number | null> {
    const labels = this.stageLabelsOfStep, layers = this.stageLayersOfStep;
    if (!labels || !layers) {
      throw new Error(
        "lastStepStageLayers: the last step recorded no stages (set countStages first)",
      );
    }
    const seen = new Map<string, Set<number> | null>();
    labels.forEach((label, i) => {
      const layer = layers[i];
      const set = seen.has(label) ? seen.get(label)! : new Set<number>();
      if (set === null || layer === null) seen.set(label, null);
      else seen.set(label, set.add(layer));
    });
    return new Map([...seen].map(([label, set]) => [label, set === null ? null : set.size]));
  }

  /** Per-dispatch GPU times of the last step (profile mode only). */
  lastStepSpans(): Promise<KernelSpan[]> {
    if (!this.spans) throw new Error("lastStepSpans: no step ran with profile on");
    return this.spans;
  }

  /** Frees GPU memory held by the model. */
  destroy(): void {
    this.weights.destroy();
    this.kv.destroy();
    this.moe?.destroy();
    for (const b of this.buf.all) b.destroy();
    this.partials?.o.destroy();
    this.partials?.lse.destroy();
    this.destroyRetired();
    this.timer.destroy();
    for (const c of this.calls.all) c.destroy();
    for (const b of this.sampleStaging) b.destroy();
    this.sampleStaging.length = 0;
  }

  private plan(batch: StepBatch): StepPlan {
    const tokens = batch.tokenIds.length;
    const seqs = batch.seqs.length;
    const rows = batch.sampleTokenIndices.length;
    if (tokens < 1 || tokens > this.maxNumTokens) {
      throw new Error(`forward: ${tokens} tokens, this model takes 1..${this.maxNumTokens} a step`);
    }
    if (seqs < 1 || seqs > this.maxNumSeqs) {
      throw new Error(`forward: ${seqs} sequences, this model takes 1..${this.maxNumSeqs} a step`);
    }
    if (rows > this.buf.maxRows) {
      throw new Error(`forward: ${rows} sampled rows, at most ${this.buf.maxRows} a step`);
    }
    for (const arr of [batch.prevSampleRef, batch.positions, batch.slotMapping]) {
      if (arr.length !== tokens) throw new Error("forward: token arrays differ in length");
    }
    for (const s of batch.seqs) {
      if (s.contextLen > this.maxModelLen) {
        throw new Error(
          `forward: context ${s.contextLen} exceeds max model length ${this.maxModelLen}`,
        );
      }
    }
    if (batch.sampling.length !== rows) {
      throw new Error("forward: one sampling entry per sampled row");
    }
    let allRows = rows === tokens;
    for (let i = 0; allRows && i < rows; i++) allRows = batch.sampleTokenIndices[i] === i;
    return { tokens, seqs, rows, decode: batch.seqs.every((s) => s.queryLen === 1), allRows };
  }

  private writeInputs(batch: StepBatch, plan: StepPlan): void {
    const d = this.gpu.device;
    const b = this.buf;
    writeBuffer(d, b.tokenIds, 0, batch.tokenIds);
    writeBuffer(d, b.prevRef, 0, batch.prevSampleRef);
    writeBuffer(d, b.positions, 0, batch.positions);
    writeBuffer(d, b.slotMapping, 0, batch.slotMapping);
    writeBuffer(d, b.seqInfo, 0, pagedAttention.packSeqInfo(batch.seqs));
    const { table, maxBlocks } = pagedAttention.packBlockTables(batch.seqs, this.blockSize);
    if (table.byteLength > b.blockTables.size) {
      throw new Error(`forward: block tables of ${maxBlocks} blocks per sequence do not fit`);
    }
    writeBuffer(d, b.blockTables, 0, table);
    this.stepMaxBlocks = maxBlocks;
    writeBuffer(d, b.sampleRows, 0, batch.sampleTokenIndices);
    const samplingRows = batch.sampling.map((s, i) => ({
      temperature: s.temperature,
      seed: s.seed >>> 0,
      position: batch.positions[batch.sampleTokenIndices[i]],
    }));
    if (plan.rows) writeBuffer(d, b.sampling, 0, sample.packSamplingRows(samplingRows));
    if (batch.blockCopies.length) {
      const pairs = kvBlockCopy.packBlockCopies(batch.blockCopies, this.numBlocks);
      if (pairs.byteLength > b.copyPairs.size) {
        throw new Error(
          `forward: ${batch.blockCopies.length} block copies, at most ${b.copyPairs.size / 8}`,
        );
      }
      writeBuffer(d, b.copyPairs, 0, pairs);
    }
  }

  private stepMaxBlocks = 1;

  private encodeStep(
    step: StepPasses,
    batch: StepBatch,
    plan: StepPlan,
    parity: number,
    submitLayers: number,
  ): void {
    const c = this.calls;
    const cfg = this.config;
    const b = this.buf;
    const dt = this.opts.dtype;
    const T = plan.tokens;
    const H = cfg.hiddenSize, hd = cfg.headDim, nq = cfg.numHeads, nkv = cfg.numKvHeads;
    // profiled: each MoE stage its own span (`moe gate_up`, ...); else all in the step's pass
    const moePass = (stage: MoeStage, normed: boolean) =>
      step.pass(MOE_STAGE_LABEL[stage], this.moe!.kernelOf(stage, normed));

    if (batch.blockCopies.length) {
      c.blockCopy.setParams({
        num_pairs: batch.blockCopies.length,
        block_size: this.blockSize,
        num_kv_heads: nkv,
        head_dim: hd,
      });
      this.kv.layers.forEach((layer, l) =>
        c.blockCopy.dispatch(step.pass("kv_block_copy"), dt, `l${l}`, {
          pairs: b.copyPairs,
          k_cache: layer.k,
          v_cache: layer.v,
        })
      );
    }

    c.embedding.setParams({ tokens: T, hidden: H, vocab: cfg.vocabSize });
    c.embedding.dispatch(step.pass("embedding"), dt, `p${parity}`, {
      token_ids: b.tokenIds,
      prev_ref: b.prevRef,
      prev_sampled: b.sampled[1 - parity],
      table: this.weights.embed,
      out: b.x,
    });

    c.norm.setParams({ rows: T, n: H, eps: cfg.rmsNormEps });
    c.norm16?.setParams({ rows: T, n: H, eps: cfg.rmsNormEps });
    const attnCommon = {
      num_seqs: plan.seqs,
      num_q_heads: nq,
      num_kv_heads: nkv,
      head_dim: hd,
      block_size: this.blockSize,
      max_blocks: this.stepMaxBlocks,
      scale: 1 / Math.sqrt(hd),
    };
    let splits = 1;
    let splitTokens = 0;
    let decodeVariant = c.decodeVariant;
    this.decodeSplitOfStep = null;
    if (plan.decode) {
      let keys = 0;
      for (const s of batch.seqs) keys += s.contextLen;
      if (keys >= DEEP_DECODE_KEYS) decodeVariant = c.decodeDeepVariant;
      const variant = variantByName(pagedAttentionDecode.spec, decodeVariant);
      const split = decodeStepSplits(
        batch.seqs.map((s) => s.contextLen),
        { numQHeads: nq, numKvHeads: nkv },
        variant,
        this.opts.decodeSplit,
      );
      splits = split.numSplits;
      splitTokens = split.splitTokens;
      this.decodeSplitOfStep = {
        variant: decodeVariant,
        splitTokens: split.splitTokens,
        numSplits: splits,
      };
      c.decode.setParams({ ...attnCommon, split_tokens: split.splitTokens, num_splits: splits });
      if (splits > 1) this.ensurePartials(plan.seqs * nq * splits);
    } else {
      c.prefill.setParams({
        ...attnCommon,
        max_query_len: pagedAttention.maxQueryLen(batch.seqs),
      });
    }
    for (const kind of Object.keys(c.linear) as LinearKind[]) {
      if (kind === "lmHead") continue;
      this.setLinear(kind, T);
    }
    // qk_norm_rope_cache adds up the qkv projection's split-K partials itself (no reduce)
    const qkvForm = this.linearForms.qkv;
    // a one-row qkv GEMV norms its input itself (gemv_norm): no rmsnorm, no norm in the combine
    const qkvNorm = qkvForm.path === "gemv" && c.qkvNorm?.has(qkvForm.variant) ? c.qkvNorm : null;
    if (qkvNorm) {
      const l = c.linear.qkv;
      qkvNorm.setParams(gemvNorm.gemvNormParams({ m: T, n: l.n, k: l.k }, cfg.rmsNormEps));
    }
    // after a MoE layer whose down GEMM adds to the residual, that kernel weights the next
    // layer's input and sums its squares, and the qkv GEMV only scales (gemv_scaled)
    const qkvScaled = qkvNorm && c.qkvScaled?.has(qkvForm.variant) &&
        (this.moe?.leavesNextInputAt(T) ?? false)
      ? c.qkvScaled
      : null;
    if (qkvScaled) {
      const l = c.linear.qkv;
      qkvScaled.setParams(
        gemvScaled.gemvScaledParams(
          { m: T, n: l.n, k: l.k, parts: this.moe!.downCombineParts },
          cfg.rmsNormEps,
        ),
      );
    }
    const qkvPartials = this.opts.qkvPartialsInRope && qkvForm.path === "tc" &&
      qkvForm.splits > 1;
    const qkvSplits = qkvPartials ? qkvForm.splits : 1;
    // prefill and mixed steps whose attention form has a -q16 twin: q as f16 times the scale
    const q16 = this.opts.prefillQF16 && !plan.decode && c.prefillVariantQ !== null;
    c.qkNorm.setParams({
      tokens: T,
      num_q_heads: nq,
      num_kv_heads: nkv,
      head_dim: hd,
      max_positions: this.maxModelLen,
      qk_norm: cfg.qkNorm ? 1 : 0,
      eps: cfg.rmsNormEps,
      splits: qkvSplits,
      split_stride: qkvPartials ? T * (nq + 2 * nkv) * hd : 0,
      q16: q16 ? 1 : 0,
      q16_scale: attnCommon.scale,
    });
    // a decode step whose attention form has a _qk twin takes qk_norm_rope_cache's work there,
    // unless each of its workgroups would add up qkv's partial sums for a short split
    const qkInAttention = plan.decode && c.decodeQk !== null && c.decodeQk.has(decodeVariant) &&
      (!qkvPartials || splitTokens >= QK_IN_ATTENTION_MIN_SPLIT_KEYS);
    if (qkInAttention) {
      c.decodeQk!.setParams({
        ...attnCommon,
        split_tokens: splitTokens,
        num_splits: splits,
        qk_norm: cfg.qkNorm ? 1 : 0,
        eps: cfg.rmsNormEps,
        max_positions: this.maxModelLen,
        qkv_splits: qkvSplits,
        qkv_split_stride: qkvPartials ? (T * (nq + 2 * nkv) * hd) / 4 : 0,
      });
    }
    // moe_router_norm adds the o projection's split-K partials to the residual, or the split
    // router reads them and the MoE combine adds them (moe_combine, moe_combine_norm, or at
    // batch 1 moe_gemm_down_combine; no reduce)
    const oForm = this.linearForms.o;
    const oPartials = this.opts.oPartialsInRouter && oForm.path === "tc" && oForm.splits > 1 &&
      (this.moe?.takesPartialsAt(T) ?? false);
    // the one-row o GEMV in split-K parts, which moe_router_logits and moe_gemm_down_combine add
    const oSplits = this.oSplitsAt(T, qkvNorm !== null);
    this.oSplitsOfStep = oSplits;
    if (oSplits > 1) {
      const l = c.linear.o;
      c.oSplit!.setParams({ m: T, n: l.n, k: l.k, accumulate: 0, splits: oSplits });
    }
    // the MoE layers' moe_combine_norm writes the next qkv GEMM's f16 operand (no cast)
    const normF16 = this.opts.combineNormF16 && this.opts.fuseCombineNorm && !qkvNorm &&
      qkvForm.path === "tc" && qkvForm.cast;
    // the split merge writes the o GEMM's f16 operand (no cast); its form for this step (CPU
    // adapters pay for the wide form's barriers: the one-group form, which has none)
    const mergeF16 = this.opts.mergeF16 && splits > 1 && oForm.path === "tc" && oForm.cast;
    // prefill and mixed steps: the attention's f16 twin writes that operand (no cast)
    const attnF16 = this.opts.mergeF16 && !plan.decode && c.prefillVariant16 !== null &&
      oForm.path === "tc" && oForm.cast;
    // the tensor-core prefill attention's out16 binding (read by no form but the f16 twin)
    // and its q16 binding (b.q, holding f16 where q16: read by the -q16 twins alone)
    const prefillOut16: Record<string, BufferArg> =
      c.prefill.spec.name !== pagedAttentionTc.spec.name
        ? {}
        : { out16: attnF16 ? this.buf.a16! : b.placeholder, q16: b.q };
    const prefillForm = q16
      ? (attnF16 ? c.prefillVariantQ16! : c.prefillVariantQ!)
      : (attnF16 ? c.prefillVariant16! : c.prefillVariant);
    const merge = this.gpu.adapter.type === "cpu"
      ? (mergeF16 ? "f16" : "f32")
      : decodeReduce.reduceVariant(splits, mergeF16);
    if (splits > 1) {
      c.decodeReduce.setParams({
        num_seqs: plan.seqs,
        num_q_heads: nq,
        head_dim: hd,
        split_tokens: splitTokens,
        num_splits: splits,
        write_f16: mergeF16 ? 1 : 0,
      });
    }
    if (this.moe) {
      this.moe.setTokens(T, {
        residualPartials: oPartials ? oForm.splits : oSplits > 1 ? oSplits : 0,
        normF16,
        // (the next qkv GEMM reads those f16 rows alone: nothing reads the f32 ones)
        normF32: !normF16,
        normNext: qkvScaled !== null,
      });
    }
    // the MoE layers' routing this step, the same in every layer: the router's logits in one
    // pass, and there the layer's input norm too (moe_router_norm)
    const moeOnePass = this.moe?.routesInOnePass ?? false;
    const moeNormsInRouter = this.moe?.normsInRouter ?? false;
    // the router's tensor-core GEMM casts its input to f16 into a16, which the expert GEMMs'
    // prefill forms read too (MoeBlockIo.x16)
    const routerForm = this.linearForms.router;
    const routerCast = !moeOnePass && routerForm.path === "tc" && routerForm.cast;
    // where those forms run, nothing reads the MoE layers' f32 normed rows: their norm writes
    // the f16 copy alone (rmsnorm_f16), and the router GEMM casts nothing
    const moeNorm16 = routerCast && !moeNormsInRouter && c.norm16 !== null &&
      (this.moe?.readsTokenRows ?? false);
    if (cfg.layerKinds.includes("dense")) {
      c.silu.setParams({ tokens: T, inter: cfg.intermediateSize });
    }

    // the split attention's partial sums, the same buffers in every layer
    const partials = plan.decode
      ? { part_o: this.partials!.o, part_lse: this.partials!.lse }
      : null;
    // b.h holds layer l's normed input already (the MoE layer before it fused the norm)
    let normed = false;
    // b.h holds layer l's input weighted by its norm weight, and ssParts its squares (qkvScaled)
    let weighted = false;
    for (let l = 0; l < cfg.numLayers; l++) {
      step.layer = l;
      const w = this.weights.layers[l];
      const kv = this.kv.layers[l];
      if (qkvScaled && weighted) {
        qkvScaled.dispatch(step.pass("linear qkv", "gemv_scaled"), qkvForm.variant, `l${l}`, {
          x: b.h,
          ss_part: this.buf.ssParts,
          w: w.qkv,
          y: b.qkv,
        });
      } else if (qkvNorm) {
        qkvNorm.dispatch(step.pass("linear qkv", "gemv_norm"), qkvForm.variant, `l${l}`, {
          x: b.x,
          norm_weight: w.inputNorm,
          w: w.qkv,
          y: b.qkv,
        });
      } else {
        if (!normed) {
          c.norm.dispatch(step.pass("rmsnorm"), dt, `in${l}`, {
            x: b.x,
            weight: w.inputNorm,
            out: b.h,
          });
        }
        // the previous MoE layer's combine wrote this layer's f16 operand too (normF16)
        const x16 = normed && normF16;
        this.linear(step, "qkv", `l${l}`, b.h, w.qkv, b.qkv, { partials: qkvPartials, x16 });
      }
      normed = false;
      weighted = false;
      // (q16: qk_norm_rope_cache binds q16, not q_out; decode steps, the only ones that take
      // the _qk twins under this key too, never set it)
      const qkvKey = `l${l}${qkvPartials ? "p" : ""}${q16 ? "q" : ""}`;
      // the projection and what norms and rotates it (without a q_norm, any buffer: unread)
      const qkIn = {
        qkv: qkvPartials ? this.buf.tcPartials! : b.qkv,
        q_norm: w.qNorm ?? w.inputNorm,
        k_norm: w.kNorm ?? w.inputNorm,
        cos_sin: b.ropeTable,
      };
      if (!qkInAttention) {
        // (q into b.q as f32, or as f16 through q16; the other binding 16 bytes, unwritten)
        c.qkNorm.dispatch(step.pass("qk_norm_rope_cache"), c.qkNormVariant, qkvKey, {
          ...qkIn,
          positions: b.positions,
          slot_mapping: b.slotMapping,
          q_out: q16 ? b.placeholder : b.q,
          k_cache: kv.k,
          v_cache: kv.v,
          q16: q16 ? b.q : b.placeholder,
        });
      }
      // the buffers every attention kernel reads and writes besides its query
      const attention = {
        k_cache: kv.k,
        v_cache: kv.v,
        block_tables: b.blockTables,
        seq_info: b.seqInfo,
        out: b.attn,
      };
      if (plan.decode) {
        if (qkInAttention) {
          c.decodeQk!.dispatch(
            step.pass("paged_attention_decode", c.decodeQk!.spec.name),
            decodeVariant,
            qkvKey,
            { ...attention, ...qkIn, ...partials },
          );
        } else {
          c.decode.dispatch(step.pass("paged_attention_decode"), decodeVariant, `l${l}`, {
            ...attention,
            q: b.q,
            ...partials,
          });
        }
        if (splits > 1) {
          const key = mergeF16 ? "all16" : "all";
          c.decodeReduce.dispatch(step.pass("paged_attention_decode_reduce"), merge, key, {
            seq_info: b.seqInfo,
            part_o: this.partials!.o,
            part_lse: this.partials!.lse,
            out: b.attn,
            out16: mergeF16 ? this.buf.a16! : b.placeholder, // (not written without mergeF16)
          });
        }
      } else {
        c.prefill.dispatch(
          step.pass("paged_attention", c.prefill.spec.name),
          prefillForm,
          attnF16 ? `l${l}h` : `l${l}`,
          { ...attention, q: b.q, ...prefillOut16 },
        );
      }
      const oOwed = (oPartials || oSplits > 1) && w.kind === "moe";
      if (oOwed && oSplits > 1) {
        c.oSplit!.dispatch(step.pass("linear o", "gemv"), oForm.variant, `l${l}`, {
          x: b.attn,
          w: w.o,
          y: this.buf.oParts,
        });
      } else {
        this.linear(step, "o", `l${l}`, b.attn, w.o, b.x, {
          partials: oOwed,
          x16: mergeF16 || attnF16,
        });
      }
      const normInRouter = w.kind === "moe" && moeNormsInRouter;
      const norm16 = moeNorm16 && w.kind === "moe";
      if (norm16) {
        c.norm16!.dispatch(step.pass("rmsnorm", "rmsnorm_f16"), "f16", `post${l}`, {
          x: b.x,
          weight: w.postNorm,
          out16: this.buf.a16!,
        });
      } else if (!normInRouter) {
        c.norm.dispatch(step.pass("rmsnorm"), dt, `post${l}`, {
          x: b.x,
          weight: w.postNorm,
          out: b.h,
        });
      }
      if (w.kind === "moe") {
        if (!moeOnePass) {
          this.linear(step, "router", `l${l}`, b.h, w.router!, b.routerLogits, { x16: norm16 });
        }
        const next = this.weights.layers[l + 1];
        normed = this.opts.fuseCombineNorm && next !== undefined && !qkvNorm;
        weighted = qkvScaled !== null;
        this.moe!.encode((stage) => moePass(stage, normed), {
          routerLogits: b.routerLogits,
          wRouter: moeOnePass ? w.router! : undefined,
          routerNorm: normInRouter
            ? {
              input: b.x,
              weight: w.postNorm,
              partials: oOwed ? (oSplits > 1 ? this.buf.oParts : this.buf.tcPartials!) : undefined,
            }
            : undefined,
          x: b.h,
          x16: routerCast ? this.buf.a16! : undefined,
          wGateUp: w.gateUp,
          wDown: w.down,
          residual: b.x,
          norm: normed
            ? { weight: next.inputNorm, out: b.h, out16: normF16 ? this.buf.a16! : undefined }
            : undefined,
          // (the last layer's for the final norm's weight: written, unread)
          nextNorm: qkvScaled
            ? {
              weight: next?.inputNorm ?? this.weights.finalNorm,
              h: b.h,
              ssPart: this.buf.ssParts,
            }
            : undefined,
          key: `l${l}`,
        });
        const r = this.routingStep;
        if (r) {
          const bytes = r.tokens * cfg.numExpertsPerTok * 4;
          step.copyOut(this.moe!.scratch.topkIds, r.buffer, r.moeIndex++ * bytes, bytes);
        }
      } else {
        this.linear(step, "gateUp", `l${l}`, b.h, w.gateUp, b.mlpGateUp);
        c.silu.dispatch(step.pass("silu_mul"), "f32", "all", {
          gate_up: b.mlpGateUp,
          out: b.mlpAct,
        });
        this.linear(step, "down", `l${l}`, b.mlpAct, w.down, b.x);
      }
      if (submitLayers > 0 && (l + 1) % submitLayers === 0 && l + 1 < cfg.numLayers) {
        step.submit();
      }
    }
    step.layer = null;

    const R = plan.rows;
    if (R === 0) return;
    // every token sampled in order (a decode step): the norm reads the residual rows themselves
    if (!plan.allRows) {
      c.gather.setParams({ count: R, width: H });
      c.gather.dispatch(step.pass("gather_rows"), "f32", "all", {
        x: b.x,
        rows: b.sampleRows,
        out: b.xs,
      });
    }
    c.finalNorm.setParams({ rows: R, n: H, eps: cfg.rmsNormEps });
    c.finalNorm.dispatch(step.pass("rmsnorm"), dt, plan.allRows ? "final-x" : "final", {
      x: plan.allRows ? b.x : b.xs,
      weight: this.weights.finalNorm,
      out: b.hs,
    });
    this.setLinear("lmHead", R);
    this.linear(step, "lmHead", "head", b.hs, this.weights.lmHead, b.logits);
    c.sample.setParams(sample.sampleParams(R, cfg.vocabSize));
    c.sample.dispatch(step.pass("sample"), c.sampleVariant, `p${parity}`, {
      logits: b.logits,
      sampling: b.sampling,
      sampled: b.sampled[parity],
    });
  }

  /**
   * The split-K parts of the MoE layers' o projection in a step of `rows` rows (1: unsplit):
   * oSplitsOneRow where the step's o runs the one-row GEMV (the split's own call, oSplit), its
   * qkv norms its input in the GEMV (`qkvNorm`), the block takes the partial sums
   * (moe_router_logits and moe_gemm_down_combine) and the form splits k so. Dense layers keep
   * the unsplit GEMV.
   */
  private oSplitsAt(rows: number, qkvNorm: boolean): number {
    const splits = this.opts.oSplitsOneRow;
    const form = this.linearForms.o;
    if (splits <= 1 || !qkvNorm || rows !== 1 || form.path !== "gemv") return 1;
    if (!this.calls.oSplit?.has(form.variant)) return 1;
    if (!(this.moe?.takesSplitPartialsAt(rows) ?? false)) return 1;
    const v = variantByName(gemv.spec, form.variant);
    return gemv.gemvSplitReason(v, this.calls.linear.o.k, splits) === null ? splits : 1;
  }

  /** The GEMV variant of `kind` for `rows` rows, or null when the GEMM takes them. */
  private gemvFor(kind: LinearKind, rows: number): string | null {
    if (rows <= this.opts.gemvMaxRows) return this.calls.gemvVariant;
    const few = this.calls.fewRowsVariant;
    if (few && rows <= Math.min(this.calls.fewRows, this.opts.stagedMaxRows)) return few;
    if (rows > this.opts.stagedMaxRows) return null;
    return this.calls.manyVariants[kind];
  }

  /**
   * The tensor-core GEMM variant of `kind` for `rows` rows and its k splits, or null when
   * another form takes them.
   */
  private tensorCoreFor(
    kind: LinearKind,
    rows: number,
  ): { variant: Variant; splits: number } | null {
    const l = this.calls.linear[kind];
    const min = this.opts.tensorCoreRows;
    if (!l.tc || min <= 0 || rows < min) return null;
    const own = (this.opts.manyRowsByKind as Record<string, string | undefined>)[kind];
    if (own && own !== "gemm" && rows <= this.opts.stagedMaxRows) return null;
    const head = kind === "lmHead" ? this.lmHeadFormFor(rows) : null;
    const variant = head ?? variantByName(
      gemmTc.spec,
      tensorCoreVariantFor(rows, l.k, {
        decodeRows: this.opts.tensorCoreDecodeRows,
        tile: this.opts.tensorCoreTile,
        subgroups: this.opts.tensorCoreDecodeSubgroups,
        prefill: rows > PREFILL_WIDE_ROWS
          ? this.opts.tensorCorePrefillWide
          : this.opts.tensorCorePrefill,
        compiled: this.calls.stagedTc,
      }),
    );
    // decode-sized steps: the form's f32-input twin where asked for and compiled (no cast)
    const twin = rows <= this.opts.tensorCoreF32InputRows ? gemmTc.a32Twin(variant.name) : null;
    const runs = twin && this.calls.stagedTc.has(twin) ? variantByName(gemmTc.spec, twin) : variant;
    const target = this.opts.tensorCoreSplitTarget;
    if (target <= 0 || kind === "lmHead") return { variant: runs, splits: 1 };
    const splits = rows <= TC_SPLIT_MAX_ROWS
      ? decodeSplits(rows, l.n, l.k, runs, target, this.opts.tensorCoreSplitMinK)
      : prefillSplits(rows, l.n, l.k, runs, (this.buf.tcPartials?.size ?? 0) / 4);
    return { variant: runs, splits };
  }

  /** The LM head's own form for `rows` rows (lmHeadForms), or null to take the linears'. */
  private lmHeadFormFor(rows: number): Variant | null {
    const name = lmHeadFormFor(this.opts.lmHeadForms, rows, this.calls.stagedTc);
    return name ? variantByName(gemmTc.spec, name) : null;
  }

  /**
   * Chooses `kind`'s form for this step's `rows` rows and writes its params; linear() then
   * dispatches that form (once per step and kind, not per layer).
   */
  private setLinear(kind: LinearKind, rows: number): void {
    const l = this.calls.linear[kind];
    const values = { m: rows, n: l.n, k: l.k, accumulate: l.accumulate ? 1 : 0, splits: 1 };
    const tc = this.tensorCoreFor(kind, rows);
    if (tc && l.tc) {
      const variant = tc.variant;
      // an -a32 form reads the f32 activations: no f16 copy
      const cast = !variant.f32Inputs;
      if (cast) {
        const rowsPad = gemmTc.gemmTcRowsPad(rows, variant);
        l.tc.cast.setParams(castF16.castF16Params(rows, rowsPad, l.k));
      }
      const kStep = gemmTc.gemmTcKStep(variant);
      const splits = Math.ceil(l.k / gemmTc.gemmTcSplitK(l.k, tc.splits, kStep));
      l.tc.gemm.setParams(
        gemmTc.gemmTcParams(rows, l.n, l.k, l.accumulate && splits === 1, tc.splits, kStep),
      );
      if (splits > 1) {
        l.tc.reduce.setParams(splitkReduce.splitkReduceParams(rows * l.n, splits, l.accumulate));
      }
      this.linearForms[kind] = { path: "tc", variant: variant.name, splits, cast };
      return;
    }
    const gemvVariant = this.gemvFor(kind, rows);
    if (gemvVariant) {
      l.gemv.setParams(values);
      this.linearForms[kind] = { path: "gemv", variant: gemvVariant };
    } else {
      l.gemm.setParams(values);
      const variant = rows <= this.opts.gemmSmallMaxRows
        ? this.calls.gemmSmallVariant
        : this.calls.gemmVariant;
      this.linearForms[kind] = { path: "gemm", variant };
    }
  }

  /**
   * One layer's `kind` linear, in the form setLinear chose for this step: y = x w^T (+= where
   * the kind accumulates). With `partials`, a split-K form leaves its partial sums in
   * tcPartials for the next kernel to add up (qkvPartials, oPartials), with no reduce
   * dispatch; with `x16`, the f16 copy of x a cast would write is in a16 already.
   */
  private linear(
    step: StepPasses,
    kind: LinearKind,
    key: string,
    x: BufferArg,
    w: BufferArg,
    y: BufferArg,
    { partials = false, x16 = false }: { partials?: boolean; x16?: boolean } = {},
  ): void {
    const l = this.calls.linear[kind];
    const form = this.linearForms[kind];
    const label = `linear ${kind}`;
    if (form.path === "gemv") {
      l.gemv.dispatch(step.pass(label, "gemv"), form.variant, key, { x, w, y });
    } else if (form.path === "gemm") {
      l.gemm.dispatch(step.pass(label, "gemm"), form.variant, key, { a: x, b: w, c: y });
    } else {
      const tc = l.tc!;
      if (form.cast && !x16) {
        tc.cast.dispatch(step.pass(label, "cast_f16"), "f16", key, { x, out: this.buf.a16! });
      }
      // split-K: partial sums into tcPartials, added up (and to the residual) by the reduce
      const split = form.splits > 1;
      const c = split ? this.buf.tcPartials! : y;
      const bindKey = `${key}${split ? "s" : ""}${form.cast ? "" : "x"}`;
      tc.gemm.dispatch(step.pass(label, "gemm_tc"), form.variant, bindKey, {
        a: form.cast ? this.buf.a16! : x,
        b: w,
        c,
      });
      if (split && !partials) {
        tc.reduce.dispatch(step.pass(label, "splitk_reduce"), "f32", key, {
          part: this.buf.tcPartials!,
          out: y,
        });
      }
    }
  }

  /**
   * Destroys buffers the model replaced, or, while prepared steps that may name them wait for
   * their launch, once the last of those is submitted (a submit naming a destroyed buffer is an
   * error, and with Dawn's validation skipped a read of freed memory).
   */
  private retire(...buffers: GPUBuffer[]): void {
    this.retired.push(...buffers);
    if (this.prepared === this.launched) this.destroyRetired();
  }

  private destroyRetired(): void {
    for (const b of this.retired) b.destroy();
    this.retired.length = 0;
  }

  /** Split-K partials for `rows` (seq, head, split) rows; grows, never shrinks. */
  ensurePartials(rows: number): void {
    const elements = rows * this.config.headDim;
    if (this.partials && this.partials.elements >= elements) return;
    if (this.partials) this.retire(this.partials.o, this.partials.lse);
    const grow = Math.max(elements, (this.partials?.elements ?? 0) * 2);
    this.partials = {
      o: createStorage(this.gpu.device, "decode.part_o", grow * 4),
      lse: createStorage(this.gpu.device, "decode.part_lse", (grow / this.config.headDim) * 4),
      elements: grow,
    };
    this.calls.decode.forget();
    this.calls.decodeReduce.forget();
    this.calls.decodeQk?.forget();
  }
}

/**
 * The passes of one step: a compute pass a submit timed as a whole, or (profile) one pass
 * per dispatch with its own timestamps.
 */
class StepPasses {
  private current: GPUComputePassEncoder | null = null;
  readonly labels: { label: string; kernel: string }[] = [];
  /** Host ms spent in beginComputePass (GpuModel.lastEncodeParts). */
  beginMs = 0;
  /** Submits so far (the step's last one is forward()'s own). */
  submits = 0;
  /** Host ms spent in those submits' queue.submit calls. */
  submitMs = 0;
  /** The stages (pass labels) asked for, one a call, in order (where `count` asks for them). */
  readonly stageLabels: string[] = [];
  /** The layer each of stageLabels was asked for in (null: outside the layers). */
  readonly stageLayers: (number | null)[] = [];
  /** The layer the step is encoding now (null outside the layers). */
  layer: number | null = null;
  /** The step's pass with `edit`'s dispatches issued its times (made on its first use). */
  private repeated: GPUComputePassEncoder | null = null;

  constructor(
    private readonly device: GPUDevice,
    private enc: GPUCommandEncoder,
    private readonly timer: PassTimer,
    private readonly profile: boolean,
    /** A stage whose dispatches go in twice or not at all (GpuModel.stageEdit; never while profiling). */
    private readonly edit: StageEdit | null = null,
    /** Record each call's label in stageLabels (GpuModel.countStages). */
    private readonly count = false,
  ) {}

  /** The encoder the step's next commands go into. */
  get encoder(): GPUCommandEncoder {
    return this.enc;
  }

  /** Submits what the step encoded so far; its later passes go into a new encoder. */
  submit(): void {
    this.end();
    const commands = this.enc.finish();
    const t0 = performance.now();
    this.device.queue.submit([commands]);
    this.submitMs += performance.now() - t0;
    this.submits++;
    this.enc = this.device.createCommandEncoder({ label: "step, continued" });
  }

  pass(label: string, kernel = label): GPUComputePassEncoder {
    if (this.count) {
      this.stageLabels.push(label);
      this.stageLayers.push(this.layer);
    }
    const pass = this.passFor(label, kernel);
    if (label !== this.edit?.stage) return pass;
    if (this.repeated === null) this.repeated = repeatedDispatches(pass, this.edit.times);
    return this.repeated;
  }

  private passFor(label: string, kernel: string): GPUComputePassEncoder {
    if (this.current && !this.profile) return this.current;
    const t0 = performance.now();
    this.current?.end();
    const name = this.profile ? label : "step";
    this.labels.push({ label: name, kernel: this.profile ? kernel : "step" });
    this.current = this.enc.beginComputePass({
      label: name,
      timestampWrites: this.timer.next(name),
    });
    this.beginMs += performance.now() - t0;
    return this.current;
  }

  end(): void {
    this.current?.end();
    this.current = null;
    this.repeated = null;
  }

  /** Ends the current pass and copies `bytes` of `src` (from 0) into `dst` at `dstOffset`. */
  copyOut(src: GPUBuffer, dst: GPUBuffer, dstOffset: number, bytes: number): void {
    this.end();
    this.enc.copyBufferToBuffer(src, 0, dst, dstOffset, bytes);
  }
}

/** Tokens a step holds unless GpuModelOptions.maxNumTokens says: 256 on a CPU adapter, else 8192. */
export function defaultMaxNumTokens(gpu: Gpu): number {
  return gpu.adapter.type === "cpu" ? 256 : 8192;
}

/** GpuModelOptions.submitLayers, checked, or its default from the environment. */
function submitLayers(asked: number | undefined): number {
  const env = process.env.WEBFPM_SUBMIT_LAYERS;
  const n = asked ?? (env ? Number(env) : 6);
  if (!Number.isInteger(n) || n < 0) {
    throw new ModelOptionError(
      `model: submitLayers ${asked ?? `WEBFPM_SUBMIT_LAYERS=${env}`} must be an integer >= 0`,
    );
  }
  return n;
}

async function createCalls(
  gpu: Gpu,
  config: ModelConfig,
  dtype: StorageDtype,
  decodeAttention: DecodeAttentionForm,
  prefillAttention: PrefillAttentionForm,
  packedF16: boolean,
  gemvForms: "decode" | "rows" | "classic",
  rowForms: {
    one: string;
    few: string;
    many: string;
    byKind: Partial<Record<"qkv" | "o" | "router" | "lmHead", string>>;
  },
  tensorCores: boolean,
  tensorCoreDecodeRows: number,
  tensorCorePrefill: readonly TensorCorePrefillForm[],
  lmHeadForms: readonly string[],
  tensorCoreF32Input: boolean,
  blockSize: number,
  minSplitTokens: number,
  decodeAttentionDefault: boolean,
  qkInDecodeAttention: boolean,
  qkvNormInGemv: boolean,
  qkvScaledAfterMoe: boolean,
  prefillQF16: boolean,
  qkNormPairs: number,
) {
  // every call made here, in `all`: the model frees them with it (kernel params buffers)
  const all: { destroy(): void }[] = [];
  const make = async <F extends ParamFields>(
    ...args: Parameters<typeof KernelCall.create<F>>
  ): Promise<KernelCall<F>> => {
    const call = await KernelCall.create(...args);
    all.push(call);
    return call;
  };
  const packed = packedF16 ? "-packed" : "";
  const tcForm = decodeAttention.startsWith("tcdw");
  if (tcForm) {
    const why = tcDecodeReason(gpu, dtype, blockSize, minSplitTokens, `f16-${decodeAttention}`) ??
      (decodeAttention === "tcdw2h"
        ? pagedAttentionDecode.tcHalfRowsReason({
          num_q_heads: config.numHeads,
          num_kv_heads: config.numKvHeads,
        })
        : null);
    if (why) {
      throw new ModelOptionError(
        `model: decode attention "${decodeAttention}" cannot run here: ${why}`,
      );
    }
  }
  const decodeVariant = decodeAttention === "lanes"
    ? lanesDecodeVariant(gpu, dtype)
    : tcForm
    ? `f16-${decodeAttention}`
    : (decodeAttention === "tiled" ? `${dtype}-tiled` : dtype) + packed;
  // steps of DEEP_DECODE_KEYS keys or more, when the caller chose no form: the tensor-core form
  // that runs here
  const deepTc = decodeAttentionDefault && decodeAttention === "tiled"
    ? deepDecodeVariant(gpu, {
      dtype,
      numQHeads: config.numHeads,
      numKvHeads: config.numKvHeads,
      blockSize,
      minSplitTokens,
    })
    : undefined;
  const decodeDeepVariant = deepTc ?? decodeVariant;
  // CPU adapters (lavapipe) pay dearly for workgroup barriers: one invocation per row there.
  // GPUs with subgroups take the decode forms (lane groups meeting through shuffles).
  const gemvVariant = gemvForms === "rows"
    ? `${dtype}-rows`
    : gemvForms === "decode" && rowForms.one
    ? linearForm(gpu, dtype, rowForms.one, "linearOneRow")
    : gemvForms === "decode"
    ? (unsupportedReason(gpu, variantByName(gemv.spec, `${dtype}-dec-w32u8`)) === null
      ? `${dtype}-dec-w32u8`
      : `${dtype}-dec`)
    : dtype === "f16" && unsupportedReason(gpu, variantByName(gemv.spec, "f16-sg")) === null
    ? `f16-sg${packed}`
    : dtype + packed;
  // a many-row form's variant (null: the GEMM)
  const manyForm = (form: string, option: string) =>
    form === "gemm"
      ? null
      : form === "staged"
      ? `${dtype}-staged${packed}`
      : linearForm(gpu, dtype, form, option);
  // the many-row form of every kind without its own (null: the GEMM)
  const stagedVariant = manyForm(rowForms.many, "linearManyRows");
  // dec8 reads each weight row once per 8 rows in one workgroup's loop: past 8 rows (one
  // pass) too few workgroups share the work (the H200, 64 rows: 4-8x slower than staged).
  const fewRowsVariant = rowForms.few
    ? linearForm(gpu, dtype, rowForms.few, "linearFewRows")
    : null;
  const fewRt = fewRowsVariant ? variantByName(gemv.spec, fewRowsVariant).consts?.RT ?? 0 : 0;
  if (
    fewRowsVariant && (laneGroupColumns(variantByName(gemv.spec, fewRowsVariant)) === null ||
      fewRt < 2)
  ) {
    throw new ModelOptionError(
      `model: linearFewRows '${rowForms.few}' is no several-row lane-group form (dec8, ` +
        "dec8-w32, dec8-w32c2, ...)",
    );
  }
  const manyVariants = {} as Record<LinearKind, string | null>;
  for (const kind of ["qkv", "o", "router", "gateUp", "down", "lmHead"] as const) {
    const form = (rowForms.byKind as Record<string, string | undefined>)[kind];
    manyVariants[kind] = form ? manyForm(form, `manyRowsByKind.${kind}`) : stagedVariant;
  }
  // its rows a pass: past them, the many-row forms
  const fewRows = fewRt;
  // The FMA tiles where the tensor cores do not run (or a layer does not fit them). gemm's
  // own tensor-core variant (f16-sgmat, staged through workgroup memory) ran 4x slower than
  // these on the H200; the tensor-core path is gemm_tc (tensorCoreRows).
  const gemmVariant: string = dtype;
  const gemmSmallVariant = `${dtype}-t64`;
  const H = config.hiddenSize, hd = config.headDim;
  const linearShapes: Record<LinearKind, [number, number, boolean]> = {
    qkv: [(config.numHeads + 2 * config.numKvHeads) * hd, H, false],
    o: [H, config.numHeads * hd, true],
    router: [config.numExperts, H, false],
    gateUp: [2 * config.intermediateSize, H, false],
    down: [H, config.intermediateSize, true],
    lmHead: [config.vocabSize, H, false],
  };
  const linear = {} as Record<LinearKind, LinearCall>;
  // the tensor-core GEMM's staged forms, where they compile (else gemm_tc's tiles alone)
  const stagedForms = [
    ...(tensorCoreDecodeRows > 0 ? gemmTc.GEMM_TCS_VARIANTS : []),
    ...tensorCorePrefill.filter((f) => f !== "tc").map((f) => `f16-${f}`),
  ];
  for (const name of lmHeadForms) {
    if (!gemmTc.spec.variants.some((v) => v.name === name)) {
      throw new ModelOptionError(
        `model: lmHeadForms '${name}' is no gemm_tc form (${
          gemmTc.spec.variants.map((v) => v.name).join(", ")
        })`,
      );
    }
  }
  // with tensorCoreF32InputRows, also the f32-input twins of those that have one
  const twins = tensorCoreF32Input
    ? stagedForms.map(gemmTc.a32Twin).filter((n): n is string => n !== null)
    : [];
  const stagedTc = tensorCores && dtype === "f16"
    ? await compiledVariants(
      gpu,
      gemmTc.spec,
      [...new Set([...stagedForms, ...twins, ...lmHeadForms])],
      "model",
    )
    : [];
  if (tensorCores) {
    const why = dtype === "f16"
      ? unsupportedReason(gpu, gemmTc.spec.variants[0])
      : "the weights are not f16";
    if (why) {
      throw new ModelOptionError(
        `model: tensorCoreRows needs the tensor-core GEMM, which cannot run here: ${why}`,
      );
    }
  }
  const shapes = Object.entries(linearShapes) as [LinearKind, [number, number, boolean]][];
  for (const [kind, [, k]] of shapes) {
    if (k % 4 !== 0) {
      throw new ModelOptionError(`model: ${kind} input width ${k} is not a multiple of 4`);
    }
  }
  // every kind's calls compiled concurrently (a driver may compile them in parallel)
  const linearCalls = async (kind: LinearKind, n: number, k: number) => {
    const [gemvCall, gemmCall, tc] = await Promise.all([
      make(
        gpu,
        gemv.spec,
        [
          ...new Set([
            gemvVariant,
            manyVariants[kind] ?? gemvVariant,
            ...(fewRowsVariant ? [fewRowsVariant] : []),
          ]),
        ],
        `gemv ${kind}`,
      ),
      make(
        gpu,
        gemm.spec,
        [gemmVariant, gemmSmallVariant],
        `gemm ${kind}`,
      ),
      // (the dense MLP's kinds only where the model has dense layers: their scratch is sized
      // from the kinds that have this path)
      tensorCores && gemmTc.gemmTcFits(n, k) &&
        (!(kind === "gateUp" || kind === "down") || config.layerKinds.includes("dense"))
        ? Promise.all([
          make(gpu, castF16.spec, ["f16"], `cast_f16 ${kind}`),
          make(
            gpu,
            gemmTc.spec,
            [...gemmTc.GEMM_TC_VARIANTS, ...stagedTc],
            `gemm_tc ${kind}`,
          ),
          make(gpu, splitkReduce.spec, ["f32"], `splitk ${kind}`),
        ]).then(([cast, gemm, reduce]) => ({ cast, gemm, reduce }))
        : null,
    ]);
    return { gemv: gemvCall, gemm: gemmCall, tc };
  };
  const built = await Promise.all(shapes.map(([kind, [n, k]]) => linearCalls(kind, n, k)));
  shapes.forEach(([kind, [n, k, accumulate]], i) => {
    linear[kind] = { ...built[i], n, k, accumulate };
  });
  // the widest input of a linear layer on the tensor cores (its f16 copy's row width), and
  // the widest output a split-K one writes partial sums of (not the LM head: its columns
  // give workgroups enough)
  const tensorCoreK = Math.max(0, ...Object.values(linear).map((l) => l.tc ? l.k : 0));
  const prefillVariant = prefillAttention === "fma" ? dtype : PREFILL_TC_VARIANT[prefillAttention];
  // its twin writing O as f16, the o projection's tensor-core operand (GpuModelOptions.mergeF16)
  const prefillVariant16 = prefillAttention === "fma"
    ? null
    : pagedAttentionTc.o16TwinOf(prefillVariant);
  // its twins reading q as f16 from qk_norm_rope_cache (GpuModelOptions.prefillQF16), with O
  // in f32 and in f16: where asked, the form has both (as it has the -o16 one) and they compile;
  // else the f32 q, saying why
  const [prefillVariantQ, prefillVariantQ16] = prefillQF16 && prefillAttention !== "fma"
    ? await q16Twins(gpu, prefillVariant, prefillVariant16)
    : [null, null];
  const tensorCoreSplitN = Math.max(
    0,
    ...Object.entries(linear).map(([kind, l]) => l.tc && kind !== "lmHead" ? l.n : 0),
  );
  const sampleVariant = sample.sampleVariant(gpu).name;
  // the decode forms whose twin takes qk_norm_rope_cache's work too (qkInDecodeAttention)
  // (where the device binds all its storage buffers, every binding being one, and the heads'
  // rotated halves are whole vec4 columns: head_dim a multiple of 8)
  const qkBindings = pagedAttentionDecodeQk.spec.bindings.length;
  const decodeQkTwins = qkInDecodeAttention && config.headDim % 8 === 0 &&
      (gpu.limits.maxStorageBuffersPerShaderStage ?? 8) >= qkBindings
    ? [...new Set([decodeVariant, decodeDeepVariant])].filter((v) =>
      pagedAttentionDecodeQk.qkTwinOf(v) !== null
    )
    : [];
  // qk_norm_rope_cache's form (GpuModelOptions.qkNormPairs: the lab forms are f16 only)
  const qkNormVariant = qkNormPairs > 1 && dtype === "f16" ? `f16-p${qkNormPairs}` : dtype;
  // the step's other calls, compiled concurrently
  const [
    embeddingCall,
    normCall,
    finalNormCall,
    qkNormCall,
    prefillCall,
    decodeCall,
    decodeReduceCall,
    decodeQkCall,
    blockCopyCall,
    siluCall,
    gatherCall,
    sampleCall,
    qkvNormCall,
    oSplitCall,
    qkvScaledCall,
    norm16Call,
  ] = await Promise.all([
    make(gpu, embedding.spec, [dtype]),
    make(gpu, rmsnorm.spec, [dtype]),
    make(gpu, rmsnorm.spec, [dtype], "final rmsnorm"),
    make(gpu, qkNormRopeCache.spec, [qkNormVariant]),
    make(
      gpu,
      prefillAttention === "fma" ? pagedAttention.spec : pagedAttentionTc.spec,
      [prefillVariant, prefillVariant16, prefillVariantQ, prefillVariantQ16].filter((v) =>
        v !== null
      ),
    ),
    make(
      gpu,
      pagedAttentionDecode.spec,
      [...new Set([decodeVariant, decodeDeepVariant])],
    ),
    make(
      gpu,
      decodeReduce.spec,
      dtype === "f16" ? ["f32", "f32-wg256", "f16", "f16-wg256"] : ["f32", "f32-wg256"],
    ),
    decodeQkTwins.length
      ? make(gpu, pagedAttentionDecodeQk.spec, decodeQkTwins)
      : Promise.resolve(null),
    make(gpu, kvBlockCopy.spec, [dtype]),
    make(gpu, siluMul.spec, ["f32"]),
    make(gpu, gatherRows.spec, ["f32"]),
    make(gpu, sample.spec, [sampleVariant]),
    // the one-row GEMV form with the input norm inside, for the qkv projection
    qkvNormInGemv && gemvNorm.spec.variants.some((v) => v.name === gemvVariant)
      ? make(gpu, gemvNorm.spec, [gemvVariant], "gemv_norm qkv")
      : Promise.resolve(null),
    // the one-row GEMV with params of its own, for the MoE layers' o in split-K parts
    gemvForms === "decode"
      ? make(gpu, gemv.spec, [gemvVariant], "gemv o split")
      : Promise.resolve(null),
    // the same form scaling a row the MoE down GEMM weighted, after a MoE layer
    qkvNormInGemv && qkvScaledAfterMoe &&
      gemvScaled.spec.variants.some((v) => v.name === gemvVariant)
      ? make(gpu, gemvScaled.spec, [gemvVariant], "gemv_scaled qkv")
      : Promise.resolve(null),
    // the MoE layers' input norm written only as the router GEMM's f16 operand (prefill steps)
    dtype === "f16" && tensorCoreK > 0
      ? make(gpu, rmsnormF16.spec, ["f16"])
      : Promise.resolve(null),
  ]);
  return {
    all,
    tensorCoreK,
    tensorCoreSplitN,
    // the staged decode forms (gemm_tcs, gemm_tcs_sg) and the prefill form (gemm_tcp) that
    // compiled here
    stagedTc: new Set(stagedTc),
    manyVariants,
    gemvVariant,
    fewRowsVariant,
    fewRows,
    stagedVariant,
    gemmVariant,
    gemmSmallVariant,
    linear,
    embedding: embeddingCall,
    norm: normCall,
    finalNorm: finalNormCall,
    qkNorm: qkNormCall,
    qkNormVariant,
    prefill: prefillCall,
    prefillVariant,
    prefillVariant16,
    prefillVariantQ,
    prefillVariantQ16,
    decodeVariant,
    decodeDeepVariant,
    decode: decodeCall,
    decodeReduce: decodeReduceCall,
    decodeQk: decodeQkCall,
    blockCopy: blockCopyCall,
    silu: siluCall,
    gather: gatherCall,
    sampleVariant,
    sample: sampleCall,
    qkvNorm: qkvNormCall,
    oSplit: oSplitCall,
    qkvScaled: qkvScaledCall,
    norm16: norm16Call,
  };
}

/**
 * The -q16 twins of the staged prefill attention form `variant` (and of its -o16 twin
 * `variant16`, where it has one), compiled; [null, null] where one is missing or does not
 * compile (said once: the model then stages an f32 q).
 */
async function q16Twins(
  gpu: Gpu,
  variant: string,
  variant16: string | null,
): Promise<[string, string | null] | [null, null]> {
  const q = pagedAttentionTc.q16TwinOf(variant);
  const q16 = q && variant16 ? pagedAttentionTc.o16TwinOf(q) : null;
  if (!q || (variant16 !== null && !q16)) return [null, null];
  const spec = pagedAttentionTc.spec;
  try {
    await Promise.all(
      [q, q16].filter((n) => n !== null).map((n) => getPipeline(gpu, spec, variantByName(spec, n))),
    );
    return [q, q16];
  } catch (err) {
    console.error(`model: ${q} left out, prefill q stays f32: ${(err as Error).message}`);
    return [null, null];
  }
}

/** paged_attention_tc's variant of each tensor-core prefill attention form. */
const PREFILL_TC_VARIANT = {
  tc: "f16-tc",
  tc2: "f16-tc2",
  tcs: "f16-tcs",
  tcs2: "f16-tcs2",
  tcs4: "f16-tcs4",
} as const;

/**
 * The prefill attention form: `asked`, or by default the first of "tcs4", "tcs2" and "tcs" that
 * runs, else "fma". Throws naming the reason when a tensor-core form is asked for and cannot run.
 */
function prefillAttentionForm(
  gpu: Gpu,
  config: ModelConfig,
  dtype: StorageDtype,
  blockSize: number,
  asked: PrefillAttentionForm | undefined,
): PrefillAttentionForm {
  if (asked === "fma") return "fma";
  const reason = (form: Exclude<PrefillAttentionForm, "fma">) =>
    dtype !== "f16" ? "the KV cache is not f16" : pagedAttentionTc.tcRunReason(
      gpu,
      variantByName(pagedAttentionTc.spec, PREFILL_TC_VARIANT[form]),
      {
        num_q_heads: config.numHeads,
        num_kv_heads: config.numKvHeads,
        head_dim: config.headDim,
        block_size: blockSize,
      },
    );
  if (asked === undefined) {
    return (["tcs4", "tcs2", "tcs"] as const).find((f) => reason(f) === null) ?? "fma";
  }
  const why = reason(asked);
  if (why === null) return asked;
  throw new ModelOptionError(`model: prefillAttention "${asked}" cannot run here: ${why}`);
}

/** GpuModelOptions.decodeSplit's numbers are positive integers, and one budget is named. */
function checkDecodeSplit(split: NonNullable<GpuModelOptions["decodeSplit"]>): void {
  for (const [name, value] of Object.entries(split)) {
    if (value !== undefined && !(Number.isInteger(value) && value >= 1)) {
      throw new ModelOptionError(
        `model: decodeSplit.${name} = ${value} must be a positive integer`,
      );
    }
  }
  if (split.workgroups !== undefined && split.wave !== undefined) {
    throw new ModelOptionError(
      "model: decodeSplit takes workgroups or wave, not both (about that many workgroups, or " +
        "whole waves of that many)",
    );
  }
}

/** GpuModelOptions.tensorCoreSplitMinK, checked. */
function splitMinK(k: number | undefined): number {
  if (k !== undefined && (!Number.isInteger(k) || k < 64 || k % 64 !== 0)) {
    throw new ModelOptionError(
      `model: tensorCoreSplitMinK = ${k} must be a positive multiple of 64`,
    );
  }
  // 0: each form's own default (see GpuModelOptions.tensorCoreSplitMinK)
  return k ?? 0;
}

/**
 * GpuModelOptions.moeExpertTiles's default for a MoE model: f16 weights whose widths are whole
 * tiles, on a GPU (not a CPU adapter) where the tiled lane-group decode forms run (subgroups).
 * Without those the tiled layout would leave decode steps the generic FMA form where rows keep
 * the staged one; neither was compared there.
 */
function expertTilesByDefault(gpu: Gpu, config: ModelConfig, dtype: StorageDtype): boolean {
  return dtype === "f16" && gpu.adapter.type !== "cpu" &&
    moeExpertsFitTiles(config.hiddenSize, config.moeIntermediateSize) &&
    unsupportedReason(gpu, variantByName(moeGateUp.spec, "f16-dec-t16")) === null;
}

/** Linear layers' tensor-core rows by default (GpuModelOptions.tensorCoreRows). */
function defaultTensorCoreRows(gpu: Gpu, dtype: StorageDtype): number {
  return dtype === "f16" && unsupportedReason(gpu, gemmTc.spec.variants[0]) === null ? 2 : 0;
}

/**
 * The tensor-core GEMM's row tile for `rows` rows: 16 up to 64 rows (four times the
 * workgroups of the 64-row tile, so a decode-sized step still fills the GPU), 32 up to 256,
 * then 64 (the most reuse of each loaded tile).
 */
export function tensorCoreTileFor(rows: number): 16 | 32 | 64 {
  return rows <= 64 ? 16 : rows <= 256 ? 32 : 64;
}

/** A variant name without its `f16-` storage prefix. */
type Form<N> = N extends `f16-${infer F}` ? F : never;

/** GpuModelOptions.moeTensorCorePrefill's forms: "tc" and the kernels' prefill forms. */
export type MoeTensorCorePrefillForm = "tc" | Form<typeof MOE_TCP_VARIANTS[number]>;
export const MOE_TENSOR_CORE_PREFILL_FORMS: readonly MoeTensorCorePrefillForm[] = [
  "tc",
  ...MOE_TCP_VARIANTS.map((n) => n.slice(4) as MoeTensorCorePrefillForm),
];

/** GpuModelOptions.tensorCorePrefill's forms: "tc" (gemm_tc's tiles) and its prefill forms. */
export type TensorCorePrefillForm = "tc" | Form<typeof gemmTc.GEMM_TCP_VARIANTS[number]>;
export const TENSOR_CORE_PREFILL_FORMS: readonly TensorCorePrefillForm[] = [
  "tc",
  ...gemmTc.GEMM_TCP_VARIANTS.map((n) => n.slice(4) as TensorCorePrefillForm),
];

/**
 * The tensor-core GEMM variant for `rows` rows of a layer with input width k: up to
 * `decodeRows` rows where k is a multiple of their 64-wide step the staged forms (one subgroup
 * a workgroup: f16-tcs32 for 17-32 rows, else f16-tcs16, whose many small workgroups beat
 * tcs64's few on the H200), else gemm_tc's tiles (`tile` rows, or 0 for tensorCoreTileFor's
 * choice). With `subgroups` "rows" (and no tile asked for) steps of 17-32 rows take
 * f16-tcs32x2 and steps of 33-128 f16-tcs64x4, past 64 rows in row blocks of 64 (each block's
 * workgroups read the weights again, mostly from L2). On the H200 (session 44, `call4`,
 * perf-decode in turn twice, the uncommitted default of f16-tcs128x8 past 64 rows against a lab
 * switch) 72 / 96 / 128 x 1024 took 27.91-27.95 / 28.22-28.24 / 30.26-30.29 ms against
 * 28.26-28.32 / 28.53-28.58 / 30.73-30.76 (the prefill form tcp128x128 before: 28.56-28.60 /
 * 28.98-29.07 / 30.53-30.65 in `call1` to `call3`); its profile at 96 x 1024 read qkv 40.8
 * µs a call against 50.3 and o 39.8 against 36.9. tcs32x2 in row blocks past 32 rows read
 * 27.72 / 28.11 / 31.06-31.09 there and lost at 40-64 rows (24.75-26.01 against 24.12-25.44).
 * A staged form missing from `compiled` gives way to the one-subgroup staged form, and that to
 * gemm_tc's tiles.
 */
export function tensorCoreVariantFor(
  rows: number,
  k: number,
  opts: {
    readonly decodeRows: number;
    readonly tile: 0 | 16 | 32 | 64;
    readonly subgroups?: "one" | "rows";
    /** The form past decodeRows (default "tc": gemm_tc's tiles). */
    readonly prefill?: TensorCorePrefillForm;
    /** The staged forms that compiled on this device (default: all). */
    readonly compiled?: ReadonlySet<string>;
  },
): string {
  const ok = (name: string) => !opts.compiled || opts.compiled.has(name);
  if (rows <= opts.decodeRows && k % 64 === 0) {
    if (opts.subgroups === "rows" && !opts.tile && rows > 16) {
      // past 64 rows tcs64x4 in row blocks (faster than tcs128x8 on the H200, above)
      const name = rows <= 32 ? "f16-tcs32x2" : "f16-tcs64x4";
      if (ok(name)) return name;
    }
    // the one-subgroup forms (also where a several-subgroup form did not compile)
    const name = `f16-tcs${opts.tile || (rows > 16 && rows <= 32 ? 32 : 16)}`;
    if (ok(name)) return name;
  }
  if (!opts.tile && opts.prefill && opts.prefill !== "tc") {
    const name = `f16-${opts.prefill}`;
    if (ok(name) && k % gemmTc.gemmTcKStep(variantByName(gemmTc.spec, name)) === 0) return name;
  }
  return `f16-tc${opts.tile || tensorCoreTileFor(rows)}`;
}

/**
 * The default GEMV forms of decode's several-row linear layers (the tensor cores take their
 * rows first from tensorCoreRows where they run). Where subgroups are 32 wide: 2-8 rows on
 * `dec8-w32c2` (a subgroup per 2 weight rows; on the H200, 2026-11-30, 8 x 1024,
 * dec8 gave the o projection 64 workgroups and read at 113 GB/s, dec8-w32c2 took the step from
 * 29.3 to 18.7 ms), the router's 9-128 on `dec8-w32c2-rb` and the LM head's on the GEMM (see
 * GpuModelOptions.manyRowsByKind); else `dec8` and the staged GEMV.
 */
function defaultRowForms(
  gpu: Gpu,
  dtype: StorageDtype,
): { few: string; byKind: Partial<Record<"qkv" | "o" | "router" | "lmHead", string>> } {
  const w32 = unsupportedReason(gpu, variantByName(gemv.spec, `${dtype}-dec8-w32c2`)) === null;
  return w32
    ? { few: "dec8-w32c2", byKind: { router: "dec8-w32c2-rb", lmHead: "gemm" } }
    : { few: "dec8", byKind: {} };
}

/** `${dtype}-${form}` of the GEMV when it exists and runs here, else an error naming `option`. */
function linearForm(gpu: Gpu, dtype: StorageDtype, form: string, option: string): string {
  const name = `${dtype}-${form}`;
  const v = gemv.spec.variants.find((x) => x.name === name);
  if (!v) {
    const forms = gemv.spec.variants.filter((x) => x.dtype === dtype).map((x) =>
      x.name.slice(dtype.length + 1)
    );
    throw new ModelOptionError(`model: ${option} '${form}' is no GEMV form (${forms.join(", ")})`);
  }
  const why = unsupportedReason(gpu, v);
  if (why) throw new ModelOptionError(`model: ${option} '${form}' does not run here: ${why}`);
  return name;
}

function createScratch(
  gpu: Gpu,
  config: ModelConfig,
  opts: { maxNumTokens: number; maxNumSeqs: number; maxModelLen: number; blockSize: number },
  tensorCoreK: number,
  tensorCoreSplitN: number,
) {
  const d = gpu.device;
  const T = opts.maxNumTokens, S = opts.maxNumSeqs;
  const H = config.hiddenSize, hd = config.headDim;
  const limit = gpu.limits.maxStorageBufferBindingSize;
  const maxRows = Math.max(1, Math.min(Math.max(S, T), Math.floor(limit / (config.vocabSize * 4))));
  const all: GPUBuffer[] = [];
  const f32 = (label: string, elements: number) => {
    const bytes = elements * 4;
    if (bytes > limit) {
      throw new ModelOptionError(
        `model: scratch ${label} needs ${bytes} bytes (> binding limit ${limit}); lower --max-num-tokens`,
      );
    }
    const b = createStorage(d, label, bytes);
    all.push(b);
    return b;
  };
  const maxBlocksPerSeq = Math.ceil(opts.maxModelLen / opts.blockSize);
  const tableElements = Math.min(S * maxBlocksPerSeq, Math.floor(limit / 4));
  const ropeData = ropeTable(opts.maxModelLen, hd, config.ropeTheta);
  const rope = uploadBuffer(d, "rope cos_sin", ropeData);
  all.push(rope);
  const bufs = {
    tokenIds: f32("token_ids", T),
    prevRef: f32("prev_ref", T),
    positions: f32("positions", T),
    slotMapping: f32("slot_mapping", T),
    seqInfo: f32("seq_info", S * 3),
    blockTables: f32("block_tables", tableElements),
    sampleRows: f32("sample_rows", maxRows),
    sampling: f32("sampling", maxRows * 4),
    copyPairs: f32("block_copy_pairs", 2 * Math.max(S, 64)),
    x: f32("x", T * H),
    h: f32("h", T * H),
    qkv: f32("qkv", T * (config.numHeads + 2 * config.numKvHeads) * hd),
    q: f32("q", T * config.numHeads * hd),
    attn: f32("attn", T * config.numHeads * hd),
    routerLogits: f32("router_logits", T * Math.max(1, config.numExperts)),
    mlpGateUp: f32(
      "mlp_gate_up",
      config.layerKinds.includes("dense") ? T * 2 * config.intermediateSize : 1,
    ),
    mlpAct: f32("mlp_act", config.layerKinds.includes("dense") ? T * config.intermediateSize : 1),
    xs: f32("sampled_x", maxRows * H),
    hs: f32("sampled_h", maxRows * H),
    logits: f32("logits", maxRows * config.vocabSize),
    sampled: [f32("sampled_a", maxRows), f32("sampled_b", maxRows)] as const,
    ropeTable: rope,
    // the f16 copy of a tensor-core linear's input, its rows padded to the largest row tile
    a16: tensorCoreK > 0
      ? f32(
        "a16",
        (Math.ceil(Math.max(S, T, maxRows) / gemmTc.MAX_ROW_TILE) * gemmTc.MAX_ROW_TILE *
          tensorCoreK) / 2,
      )
      : null,
    // split-K partial sums of a tensor-core linear: TC_MAX_SPLITS slices of TC_SPLIT_MAX_ROWS
    // rows (prefill-sized steps split only where theirs fit: prefillSplits)
    tcPartials: tensorCoreSplitN > 0
      ? f32("tc_partials", TC_MAX_SPLITS * Math.min(T, TC_SPLIT_MAX_ROWS) * tensorCoreSplitN)
      : null,
    // the one-row o GEMV's split-K partial sums (oSplitsOneRow; one row, at most O_MAX_SPLITS)
    oParts: f32("o_parts", O_MAX_SPLITS * H),
    // the residual's squares in block sums the MoE down GEMM leaves a one-row qkv GEMV (one row,
    // at most a block a column)
    ssParts: f32("ss_parts", H),
    // bound where a kernel's writable binding goes unwritten (WebGPU forbids binding one buffer
    // twice where either binding is writable), as the MoE block's scratch.placeholder
    placeholder: f32("placeholder", 4),
  };
  return { ...bufs, all, maxRows };
}
