/**
 * The MoE block on the GPU with no host read-back, and its CPU reference.
 *
 * Dispatch sequence (one compute pass, or a pass each when profiled; N = tokens * k rows):
 *   1. moe_router        [tokens] workgroups        logits -> topk_ids, topk_weights (`f32-sg`
 *      where subgroups run: a subgroup a token, [tokens / 8] workgroups)
 *      (moe_router_fused for f16 steps of 2 to fusedRouterMaxTokens tokens, given the router
 *       weight: x, w_router -> logits, topk_ids, topk_weights; moe_router_norm there, given
 *       routerNorm too: the layer's input RMSNorm first, residual -> x, then the same)
 *   2. moe_dispatch      [N / 2048] workgroups      -> expert_offsets, sorted_token, row_of,
 *                                                      work_items, dispatch_args
 *   (1 and 2 in one workgroup, moe_route_dispatch, for steps of 1 to routeDispatchMaxTokens
 *    tokens that do not route in one pass: batch-1 decode; there, where the gate/up GEMM takes
 *    a lane-group decode form, its twin moe_gemm_gate_up_routed ranks the logits in every
 *    workgroup instead and writes the routing: no dispatch between the logits and the GEMM)
 *   (before 1, given the router weight and routerNorm, for f16 steps of splitRouterMinTokens
 *    to splitRouterMaxTokens tokens: moe_router_logits [expert groups x token blocks]
 *    workgroups, residual -> x, logits: the input RMSNorm and the logits over the GPU; then
 *    moe_router, or moe_route_dispatch in its steps)
 *   3. moe_gemm_gate_up  indirect (dispatch_args+0)  x, w_gate_up -> act [N, inter]
 *   4. moe_gemm_down     indirect (dispatch_args+12) act, w_down -> y [N, hidden]
 *   (3, 4 on the tensor cores: moe_gather_f16 -> a16 [N + 128, hidden], moe_gemm_gate_up_tc
 *    -> act16 [N + 128, inter] f16, moe_gemm_down_tc -> y; their `f16-tc` forms for
 *    prefill-sized steps, their staged `f16-tcs` forms for 2-8 rows an expert; the prefill
 *    forms `f16-tcp*` take cast_f16 -> a16 [tokens, hidden] instead of the gather and read a
 *    row's token through sorted_token)
 *   5. moe_combine       tokens * hidden / 4 invocations: residual += sum_j w * y[row]
 *      (moe_combine_norm, given MoeBlockIo.norm: [tokens] workgroups, then the next layer's
 *       input RMSNorm of the new residual into norm.out)
 * Bytes (s = bytes per weight, U = experts that receive a token): router T*E*4 + N*8;
 * dispatch N*12 + (E+1)*4 + 16*(items+1) + 24; gate/up U*2*I*H*s + N*H*4 + N*I*4;
 * down U*H*I*s + N*I*4 + N*H*4; combine T*H*(8 + 4k) + N*8 (see moe_cost.ts).
 *
 * ```ts
 * const block = await MoeBlock.create(gpu, { hidden, inter, experts, topK, normTopk: true,
 *   maxTokens: 256, dtype: "f16" });
 * block.setTokens(tokens); // before the submit that carries the encoded passes
 * block.encode(pass, { routerLogits, x, wGateUp, wDown, residual });
 * ```
 */
import type { Gpu } from "../src/gpu/device.ts";
import { BufferUsage } from "../src/gpu/device.ts";
import { createStorage, STORAGE_USAGE, writeBuffer } from "../src/gpu/buffers.ts";
import {
  type BufferArg,
  getPipeline,
  type KernelPipeline,
  type KernelSpec,
  makeBindGroup,
  unsupportedReason,
  type Variant,
  variantByName,
} from "./kernel.ts";
import type { ParamFields, ParamValues } from "./params.ts";
import * as router from "./moe_router.ts";
import * as routerFused from "./moe_router_fused.ts";
import * as routerNorm from "./moe_router_norm.ts";
import * as routerLogits from "./moe_router_logits.ts";
import * as dispatch from "./moe_dispatch.ts";
import * as routeDispatch from "./moe_route_dispatch.ts";
import { laneGroupColumns, wideWordsFit } from "./lane_group_variants.ts";
import { MOE_STAGE_KERNEL, type MoeStage } from "./moe_cost.ts";
export type { MoeStage } from "./moe_cost.ts";
import * as gateUp from "./moe_gemm_gate_up.ts";
import * as gateUpRouted from "./moe_gemm_gate_up_routed.ts";
import * as down from "./moe_gemm_down.ts";
import * as downCombine from "./moe_gemm_down_combine.ts";
import * as combine from "./moe_combine.ts";
import * as combineNorm from "./moe_combine_norm.ts";
import * as gatherF16 from "./moe_gather_f16.ts";
import * as castF16 from "./cast_f16.ts";
import { clampF16, f16ToF32, f32ToF16, roundToF16InPlace } from "../src/util/f16.ts";
import * as gateUpTc from "./moe_gemm_gate_up_tc.ts";
import * as downTc from "./moe_gemm_down_tc.ts";
import { MOE_TC_PAD_ROWS } from "./moe_tc_routing.ts";
import { moeExpertsFitTiles } from "./expert_tiles.ts";

/** Shape of one MoE block (all layers of a model share it). */
export interface MoeBlockShape {
  readonly hidden: number;
  /** Expert width (moe_intermediate_size). */
  readonly inter: number;
  readonly experts: number;
  readonly topK: number;
  readonly normTopk: boolean;
  /** Most tokens one step may carry (scratch buffers are sized for it). */
  readonly maxTokens: number;
  /** Storage type of the expert weights (and of the norm weight of MoeBlockIo.norm). */
  readonly dtype: "f16" | "f32";
  /** The RMSNorm epsilon of MoeBlockIo.norm (default 1e-6). */
  readonly rmsNormEps?: number;
  /**
   * The expert weights are stored in tiles (kernels/expert_tiles.ts), not row by row: every
   * expert GEMM form the block takes is its `-t16` twin. f16 only, hidden and inter multiples
   * of 64; a form without a twin (the staged and subgroup FMA forms) is refused by name.
   */
  readonly expertTiles?: boolean;
}

/** The name of form `name` for the block's layout of the expert weights. */
function layoutForm(shape: MoeBlockShape, name: string): string {
  return shape.expertTiles && !name.endsWith("-t16") ? `${name}-t16` : name;
}

/** The buffers of one layer's call. */
export interface MoeBlockIo {
  /**
   * f32 [tokens, experts]: the router logits, from the router weight's gemv/gemm; written here
   * instead in the steps that route in one pass (MoeBlock.routesInOnePass, given wRouter).
   */
  readonly routerLogits: BufferArg;
  /**
   * T [experts, hidden]: the router weight. Given it, the steps that route in one pass
   * (MoeBlock.routesInOnePass) write routerLogits instead of reading them.
   */
  readonly wRouter?: BufferArg;
  /**
   * f32 [tokens, hidden]: the normed hidden states the experts read; written here instead in
   * the steps that norm in the router (MoeBlock.normsInRouter, given routerNorm).
   */
  readonly x: BufferArg;
  /**
   * f16 [tokens, hidden]: x rounded to f16 as cast_f16 writes it, where the caller has that
   * copy already (the router's tensor-core GEMM cast its input): the prefill forms of the
   * expert GEMMs read it instead of casting x again.
   */
  readonly x16?: BufferArg;
  /**
   * The MoE layer's input RMSNorm, fused into the one-pass router (moe_router_norm) in the
   * steps that norm in the router (MoeBlock.normsInRouter, with wRouter): the rows it norms
   * (f32 [tokens, hidden], the residual) and its weight (T [hidden]); the normed rows go to x.
   * The caller leaves out its own rmsnorm there. `partials`: the split-K partial sums the
   * residual still owes (the o projection's, as many as setTokens was told), which
   * moe_router_norm adds to it first (the caller leaves out that reduce too).
   */
  readonly routerNorm?: {
    readonly input: BufferArg;
    readonly weight: BufferArg;
    readonly partials?: BufferArg;
  };
  /** T [experts, 2 * inter, hidden]: each expert's gate rows, then its up rows. */
  readonly wGateUp: BufferArg;
  /** T [experts, hidden, inter]. */
  readonly wDown: BufferArg;
  /** f32 [tokens, hidden], updated in place: residual += moe(x). */
  readonly residual: BufferArg;
  /**
   * The next layer's input RMSNorm, fused into the combine (moe_combine_norm): its weight
   * (T [hidden]) and where the normed rows go (f32 [tokens, hidden]); `out16`, where they go
   * in the storage type too (T [tokens, hidden], the next tensor-core GEMM's operand), in the
   * steps setTokens was told so (normF16).
   */
  readonly norm?: {
    readonly weight: BufferArg;
    readonly out: BufferArg;
    readonly out16?: BufferArg;
  };
  /**
   * In the steps setTokens was told so (normNext), where the down GEMM adds to the residual
   * (moe_gemm_down_combine): the next layer's input norm weight (T [hidden]), and where that
   * kernel leaves the next qkv GEMV (gemv_scaled) its input, residual * weight (f32 [tokens,
   * hidden]), and the residual's squares in block sums (f32 [tokens, downCombineParts]).
   */
  readonly nextNorm?: {
    readonly weight: BufferArg;
    readonly h: BufferArg;
    readonly ssPart: BufferArg;
  };
  /**
   * Names this buffer set (e.g. the layer) so its bind groups are made once and reused;
   * without it they are made on every encode.
   */
  readonly key?: string;
}

/** Options of MoeBlock.create. */
export interface MoeBlockOptions {
  /** GEMM variant name, or "auto" (default): per step, by rows per expert and device. */
  readonly gemm?: string;
  /** Rows per work item (default MOE_BLOCK_M). */
  readonly blockM?: number;
  /**
   * With "auto", these forms (variant names without the dtype) instead of the chosen decode
   * form of a stage, wherever a decode form is chosen (at most 16 rows an expert).
   */
  readonly decodeForms?: { readonly gateUp?: string; readonly down?: string };
  /** "auto" falls back on the staged form's f16 words variant (`f16-staged-packed`). */
  readonly packedF16?: boolean;
  /**
   * With "auto", steps of more than this many rows an expert on average run the expert
   * GEMMs on the tensor cores (moe_gather_f16, moe_gemm_gate_up_tc, moe_gemm_down_tc) where
   * f16 subgroup matrices run, the weights are f16, work items have 64 rows and the shape
   * fits (moeTcFits); 0 or below: never. Default MOE_TC_ROWS_PER_EXPERT.
   */
  readonly tensorCoreRowsPerExpert?: number;
  /**
   * With the tensor-core pipelines (see tensorCoreRowsPerExpert), steps of more than this many
   * rows an expert, up to tensorCoreRowsPerExpert, run their decode forms (`f16-tcs`: 16 rows
   * a tile, the weights staged through workgroup memory from 16-byte loads, one pass over an
   * expert's weights for 1-16 rows); below 0: never. Default MOE_TCS_ROWS_PER_EXPERT.
   */
  readonly tensorCoreDecodeRowsPerExpert?: number;
  /**
   * The tensor-core expert GEMMs' prefill-sized form: `f16-tc` (default: operands loaded
   * straight from memory) or a prefill form that stages both through workgroup memory
   * (`f16-tcp1`, `f16-tcp2`, `f16-tcp4`: subgroups a workgroup; see moeTcVariants). A form
   * that does not fit the shape or does not compile gives way to `f16-tc`.
   */
  readonly tensorCorePrefill?: string;
  /**
   * Steps on the prefill form write the experts' down rows as f16 (its `-y16` twin, see
   * kernels/moe_gemm_down_tc.ts) and combine them from f16 (moe_combine's and
   * moe_combine_norm's `-y16` forms): half of y's bytes written and read again (at 16384 tokens
   * 1 GB of f32 a layer), for two barriers a tile in the down GEMM and one f16 rounding of each
   * expert row (as vLLM's fused MoE keeps them in the activations' type). Where the twin or its
   * combines do not compile, the f32 rows. Default false here; the model turns it on
   * (GpuModelOptions.moeDownRowsF16).
   */
  readonly downRowsF16?: boolean;
  /**
   * f16 steps of fusedRouterMinTokens to this many tokens compute the router logits
   * and their top-k in one dispatch (moe_router_fused, from MoeBlockIo.wRouter) where the
   * caller would run the router's GEMV and then moe_router; 0: never. Default
   * MOE_FUSED_ROUTER_MAX_TOKENS.
   */
  readonly fusedRouterMaxTokens?: number;
  /**
   * The fewest tokens of a step that routes in one pass (a positive integer; default
   * MOE_FUSED_ROUTER_MIN_TOKENS, 2). 1 takes batch-1 decode there too: one workgroup reads
   * the whole router weight, and with fusedRouterNorm the step's input norm, router and top-k
   * take one dispatch and moe_dispatch another, where rmsnorm, the GEMV and
   * moe_route_dispatch take three.
   */
  readonly fusedRouterMinTokens?: number;
  /**
   * The steps that route in one pass also take the layer's input RMSNorm there
   * (moe_router_norm, given MoeBlockIo.routerNorm), one dispatch a layer fewer; default true.
   */
  readonly fusedRouterNorm?: boolean;
  /**
   * Steps of 1 to this many tokens that do not route in one pass take moe_route_dispatch: the
   * router's top-k and the dispatch in one workgroup, one dispatch where moe_router and
   * moe_dispatch take two; 0: never. Default MOE_ROUTE_DISPATCH_MAX_TOKENS (16: the steps that
   * split their router).
   */
  readonly routeDispatchMaxTokens?: number;
  /**
   * f16 steps of splitRouterMinTokens to this many tokens, given MoeBlockIo.wRouter and
   * routerNorm, take the layer's input RMSNorm and the router logits over the GPU
   * (moe_router_logits: a group of experts by a token a workgroup), then the top-k in
   * moe_router (with the dispatch in moe_route_dispatch where routeDispatchMaxTokens takes the
   * step), where the one-pass routers give a token one workgroup that reads the whole router
   * weight; 0: never. The o projection's split-K partial sums then go to the router's logits
   * and the combine. Off with fusedRouterNorm false. Default MOE_SPLIT_ROUTER_MAX_TOKENS.
   */
  readonly splitRouterMaxTokens?: number;
  /** The fewest tokens of a step that splits its router (default MOE_SPLIT_ROUTER_MIN_TOKENS). */
  readonly splitRouterMinTokens?: number;
  /**
   * Batch-1 steps that take moe_route_dispatch and a lane-group decode form of the gate/up GEMM
   * run its routed twin instead (moe_gemm_gate_up_routed: every workgroup ranks the logits,
   * one dispatch a layer fewer), where the device binds its nine storage buffers; default true.
   */
  readonly routedGateUp?: boolean;
  /**
   * Steps of 1 to this many tokens whose expert GEMMs take the lane-group decode forms, encoded
   * without MoeBlockIo.norm, run the down GEMM with the combine fused
   * (moe_gemm_down_combine: each workgroup sums its columns over the token's ranks and adds them
   * to the residual): one dispatch a layer fewer, and no y rows written and read back; 0: never.
   * Default MOE_DOWN_COMBINE_MAX_TOKENS. The caller norms the next layer's input itself then
   * (gemv_norm), as encode is given no norm.
   */
  readonly downCombineMaxTokens?: number;
  /**
   * moe_gemm_down_combine's form, without the dtype and layout suffixes (`dc-w32c4`, ...);
   * default `dc-w32c4` where subgroups are 32 wide or more, else `dc`.
   */
  readonly downCombineForm?: string;
}

/**
 * Tokens up to which a step fuses the combine into its down GEMM by default
 * (moe_gemm_down_combine): batch-1 decode, where each expert row is the one token's, so no
 * expert's weights are read twice.
 */
export const MOE_DOWN_COMBINE_MAX_TOKENS = 1;

/**
 * Tokens from which and up to which a step routes in one pass by default (moe_router_fused:
 * one workgroup a token, the router weight from cache after the first). H200, Qwen3-30B-A3B,
 * 2026-12-01, decode GPU ms at ctx 1024, the GEMV and moe_router -> one pass: batch 8 15.18 ->
 * 14.74, 32 29.10 -> 28.59, 64 34.17 -> 33.65, 128 39.60 -> 39.05; batch 1 5.87 -> 6.12 (one
 * workgroup reads the whole router weight, where the GEMV spreads it over the GPU).
 */
export const MOE_FUSED_ROUTER_MIN_TOKENS = 2;

/**
 * Tokens from which and up to which a step splits its router by default (moe_router_logits):
 * 1-16 tokens (the batch-1 H200 figures are in kernels/moe_router_logits.ts). From 3 tokens the
 * staged forms take the logits (f16-s16 / f16-s32: the residual row read once a workgroup into
 * workgroup memory, 16 or 32 experts a workgroup), moe_route_dispatch's subgroup form ranks them
 * (f32-sg, a subgroup a token) and the MoE combine adds the o projection's split-K partial sums,
 * so no splitk_reduce runs. H200, Qwen3-30B-A3B, session 43 (`call9`), perf-decode GPU ms, two
 * processes each, moe_router_norm with moe_dispatch -> the split router up to 16 tokens: 4 x 1024
 * 8.64 / 8.65 -> 8.35 / 8.30, 8 x 1024 11.38 / 11.39 -> 11.10 / 11.06, 16 x 1024 15.79 / 15.76 ->
 * 15.65 / 15.64; up to 64 or 128 tokens slower past 16 (32 x 1024 21.55-21.60 -> 21.92-21.96, 64 x
 * 1024 25.39-25.40 -> 26.81-26.86: one workgroup ranking 64 tokens, 49 µs a call in the profile).
 * Before those forms (the lane form at every batch, moe_router_logits reading the residual row
 * in every expert group, the o projection's reduce, and the one-invocation-a-pair ranking): H200,
 * Qwen3-30B-A3B, 2026-12-03, perf-decode GPU ms, the one-pass router -> split, two processes
 * each in each of two calls: 2 x 1024 6.94-6.98 -> 6.75-6.82, 2 x 8192 7.73-7.76 -> 7.59-7.68;
 * at 3 and 4 tokens no faster (3 x 1024 7.92 -> 7.92-8.00, 3 x 8192 8.87-8.90 -> 8.94-9.01,
 * 4 x 1024 8.77-8.79 -> 8.82-8.88) and at 8 slower (11.58-11.67 -> 12.07-12.12: the reduce,
 * 8.5 µs a layer in the profile, and the logits with the ranking, 42 µs against 37 for
 * moe_router_norm with moe_dispatch).
 */
export const MOE_SPLIT_ROUTER_MIN_TOKENS = 1;
export const MOE_SPLIT_ROUTER_MAX_TOKENS = 16;
export const MOE_FUSED_ROUTER_MAX_TOKENS = 128;

/**
 * The grouped-GEMM variants of a stage (gate/up or down) for a step, best first: the decode
 * forms (subgroup lane groups, weights read once per RT rows) when an expert gets at most 16
 * rows on average, then the staged form (no subgroups), and the tiled form otherwise. Where
 * subgroups are 32 wide, by rows per expert (H200, Qwen3-30B-A3B, 2026-11-30, one decode
 * step profiled per form):
 * - gate/up: `dec-w32c2` up to 2 (8 x 1024: 4.97 ms against dec-w32's 5.93; 2026-12-02, 32 x
 *   1024 decode steps 23.48 ms against dec-w32's 25.20, dec-w32c2u3r2 25.00, dec-w32c4u3r1
 *   31.06), `dec-w32` up to 4 (64 x 1024: 18.1 ms; dec-w32c2 19.8, dec8 22.3), then
 *   `dec-w32-wg256` (128 x 1024: the step 103.7 -> 94.2 ms against dec8);
 * - down: `dec-w32c4u3r1` up to 1 and `dec-w32c2u3r2` up to 2 (2026-12-02, session 21: 1 / 8 /
 *   16 / 32 x 1024 decode steps 5.24 / 12.47 / 17.34 / 25.67 ms and 5.40 / 12.65 / 17.38 /
 *   25.20 against dec-w32c2's 5.54 / 13.04 / 18.04 / 26.20, and dec's 26.45 at 32; see
 *   moeDecodeVariants), `dec` up to 4 (64 x 1024: 11.1 ms; dec8 13.1, dec8c4 15.7), then `dec8`.
 *   Earlier the same day dec-w32c2 had beaten dec-w32 (14.06 ms against 14.55 at 8 x 1024).
 * Those three f16 forms reading their weights as 16-byte words (`-ww`, where both GEMMs'
 * reduction widths are multiples of 8) go first: H200, session 36, perf-decode GPU ms, two
 * processes each, alternating (8-byte words -> 16-byte): 1 x 1024 4.18 -> 4.10, 1 x 8192
 * 4.64-4.65 -> 4.56-4.57, 8 x 1024 11.39-11.40 -> 11.26, 8 x 8192 13.59-13.66 -> 13.61,
 * 16 x 1024 15.84-15.87 -> 15.75-15.77 (down in dec-w32c2u3r2-ww), 32 x 1024 22.03-22.11 ->
 * 21.42-21.46. (The one-row GEMV of the linear layers read slower so: 1 x 1024 4.15-4.17 with
 * `dec-w32u8-ww` beside these, against 4.10 without.)
 * Elsewhere the 8-lane forms. The block takes the first one it compiled.
 */
export function moeGemmVariantFor(
  dtype: "f16" | "f32",
  tokens: number,
  topK: number,
  experts: number,
  packedF16 = false,
  stage: "gate_up" | "down" = "gate_up",
): string[] {
  const perExpert = (tokens * topK) / experts;
  const staged = `${dtype}-staged${packedF16 && dtype === "f16" ? "-packed" : ""}`;
  const [w32, w32c2, wg256, dec, dec8, c4r1, c2r2] = [
    `${dtype}-dec-w32`,
    `${dtype}-dec-w32c2`,
    `${dtype}-dec-w32-wg256`,
    `${dtype}-dec`,
    `${dtype}-dec8`,
    `${dtype}-dec-w32c4u3r1`,
    `${dtype}-dec-w32c2u3r2`,
  ];
  if (perExpert > 16) return [dtype];
  // the measured forms' 16-byte-word twins first (f16; the block compiles them where they fit)
  const ww = (name: string) => dtype === "f16" ? [`${name}-ww`, name] : [name];
  if (perExpert > 4) {
    return stage === "gate_up" ? [wg256, dec8, w32, staged, dtype] : [dec8, w32, staged, dtype];
  }
  if (stage === "down") {
    return perExpert <= 1
      ? [...ww(c4r1), w32c2, w32, dec, dec8, staged, dtype]
      : perExpert <= 2
      ? [...ww(c2r2), dec, w32, dec8, staged, dtype]
      : [dec, w32, dec8, staged, dtype];
  }
  return perExpert <= 2
    ? [...ww(w32c2), w32, dec, dec8, staged, dtype]
    : [w32, dec, dec8, staged, dtype];
}

/**
 * Rows an expert above which a step's expert GEMMs take the tensor cores by default. H200,
 * Qwen3-30B-A3B, 2026-11-30, prefill GPU ms, the FMA forms -> the tensor cores: 1 x 2048 (128
 * rows an expert) 581 -> 480, 1 x 256 (16) 115 -> 85, 1 x 128 (8) 65 -> 60; decode steps
 * (at most 8 rows an expert up to batch 128) keep the decode forms until measured.
 */
export const MOE_TC_ROWS_PER_EXPERT = 8;

/**
 * Rows an expert above which (up to MOE_TC_ROWS_PER_EXPERT) a step's expert GEMMs take the
 * tensor-core decode forms (`f16-tcs`) by default. H200, Qwen3-30B-A3B, 2026-11-30, decode GPU
 * ms, the lane-group forms -> f16-tcs (a57b92f; the lane-group figures at 8 and 64 x 1024 from
 * the same call, at 32 and 128 x 1024 from the one before): 8 x 1024 (0.5 rows an expert) 15.6
 * -> 19.0, 32 x 1024 (2) 33.0 -> 34.3, 64 x 1024 (4) 48.1 -> 44.2, 128 x 1024 (8) 78.0 -> 53.6.
 */
export const MOE_TCS_ROWS_PER_EXPERT = 2;

/**
 * The tensor-core form of a step's expert GEMMs at `perExpert` rows an expert on average:
 * "tc" (the prefill form) above `min` rows (MOE_TC_ROWS_PER_EXPERT; 0 or below: no tensor
 * cores), "tcs" (the staged decode form) above `decodeMin` (MOE_TCS_ROWS_PER_EXPERT; below 0:
 * never), else null (the lane-group or FMA forms).
 */
export function moeTensorCoreForm(
  perExpert: number,
  min = MOE_TC_ROWS_PER_EXPERT,
  decodeMin = MOE_TCS_ROWS_PER_EXPERT,
): "tc" | "tcs" | null {
  if (min <= 0 || perExpert <= 0) return null;
  if (perExpert > min) return "tc";
  return decodeMin >= 0 && perExpert > decodeMin ? "tcs" : null;
}

type Pipe = KernelPipeline<ParamFields>;

/**
 * Floats of the `tile` scratch (MOE_TC_TILE) for the staged decode forms' largest step: the
 * most tokens (at most `maxTokens`) whose rows an expert moeTensorCoreForm sends to them
 * (`rowsPerExpert`: the prefill forms' threshold above them), in work items of `blockM` rows,
 * on the larger grid of the two GEMMs (`gateUpColumns` / `downColumns` columns a workgroup).
 */
export function decodeTileFloats(
  shape: Pick<MoeBlockShape, "hidden" | "inter" | "experts" | "topK" | "maxTokens">,
  rowsPerExpert: number,
  gateUpColumns: number,
  downColumns: number,
  blockM: number,
): number {
  const tokens = Math.min(
    shape.maxTokens,
    Math.floor((rowsPerExpert * shape.experts) / shape.topK),
  );
  const items = dispatch.moeMaxWorkItems(tokens * shape.topK, shape.experts, blockM);
  const gridX = Math.max(shape.inter / gateUpColumns, shape.hidden / downColumns);
  return Math.max(4, gateUpTc.moeTcTileFloats(gridX, items));
}

/** Scratch buffers of the block, sized for maxTokens (exposed for tests and tracing). */
export interface MoeBlockScratch {
  readonly topkIds: GPUBuffer;
  readonly topkWeights: GPUBuffer;
  readonly expertOffsets: GPUBuffer;
  readonly sortedToken: GPUBuffer;
  readonly rowOf: GPUBuffer;
  readonly workItems: GPUBuffer;
  /** INDIRECT | STORAGE, 6 u32: gate/up args at byte 0, down args at byte 12. */
  readonly dispatchArgs: GPUBuffer;
  readonly act: GPUBuffer;
  readonly y: GPUBuffer;
  /** The tensor-core path's f16 operands (null where it does not run). */
  readonly a16: GPUBuffer | null;
  readonly act16: GPUBuffer | null;
  /**
   * The staged decode forms' sums on their way out (MOE_TC_TILE), sized for the most tokens
   * they take (16 bytes where they do not run).
   */
  readonly tile: GPUBuffer;
  /** 16 bytes bound where a binding is not read or written in a step (o_part, out16). */
  readonly placeholder: GPUBuffer;
}

/** One form of the tensor-core expert GEMMs: its gate/up and down pipelines. */
interface TcPair {
  readonly gateUp: Pipe;
  readonly down: Pipe;
}

/** The tensor-core path's pipelines. */
interface TcPipes {
  readonly gather: Pipe;
  /** cast_f16: the token rows in f16 for the prefill forms (gateUpTc.readsTokenRows). */
  readonly cast: Pipe;
  /**
   * `f16-tc` or the prefill form asked for (MoeBlockOptions.tensorCorePrefill), its down GEMM
   * the -y16 twin where MoeBlockOptions.downRowsF16 took it.
   */
  readonly prefill: TcPair;
  /** The combines that read those f16 rows; null where the prefill pair writes f32 ones. */
  readonly combineY16: { readonly combine: Pipe; readonly combineNorm: Pipe } | null;
  /** `f16-tcs`, decode-sized steps; null where they are off or did not compile. */
  readonly decode: TcPair | null;
}

/** One MoE block's pipelines, params and scratch; encode() records its five dispatches. */
export class MoeBlock {
  private tokens = -1;
  /** The split-K partial sums this step's residual owes moe_router_norm (setTokens). */
  private residualPartials = 0;
  /** Whether this step's moe_combine_norm also writes its rows in the storage type. */
  private normF16 = false;
  /** Whether this step's moe_combine_norm writes its f32 rows (norm.out). */
  private normF32 = true;
  /** Whether this step's moe_gemm_down_combine leaves the next layer's input (nextNorm). */
  private normNext = false;
  /** Whether this step combines in its down GEMM (combinesInDownAt, set by setTokens). */
  private combinedStep = false;
  /** combinesInDownAt's answers by tokens (the options and pipelines never change). */
  private readonly combinesAt = new Map<number, boolean>();
  /** Bind groups by pipeline, then by MoeBlockIo.key. */
  private readonly bindGroups = new Map<Pipe, Map<string, GPUBindGroup>>();
  private gateUpName = "";
  private downName = "";
  private routerGrid: readonly number[] = [];
  /** A workgroup a token: the one-pass routers' grid (moe_router_fused, moe_router_norm). */
  private tokenGrid: readonly number[] = [];
  private routerLogitsGrid: readonly number[] = [];
  /** The split router's pipeline for the step set by setTokens (lane or staged form). */
  private splitPipe: Pipe | null = null;
  private combineGrid: readonly number[] = [];
  private combineNormGrid: readonly number[] = [];
  private downCombineGrid: readonly number[] = [];
  private gatherGrid: readonly number[] = [];
  /**
   * Whether this step's gate/up GEMM reads the token rows through sorted_token (a prefill
   * form, gateUpTc.readsTokenRows): cast_f16 writes a16 then, not moe_gather_f16.
   */
  private castRows = false;
  private castGrid: readonly number[] = [];
  /** Whether this step ranks its logits in the gate/up GEMM (moe_gemm_gate_up_routed). */
  private routedStep = false;
  private routedGrid: readonly number[] = [];
  /** The tensor-core pipelines of this step's expert GEMMs when they run on them, else null. */
  private stepTc: TcPair | null = null;
  /**
   * The combines of this step where its down GEMM writes its rows as f16
   * (MoeBlockOptions.downRowsF16), else null.
   */
  private stepCombineY16: TcPipes["combineY16"] = null;
  /** Which router the encode in progress runs (kernelOf names it for a profile's spans). */
  private encodingRouter:
    | "moe_router_norm"
    | "moe_router_fused"
    | "moe_router_logits"
    | "moe_router"
    | "moe_route_dispatch"
    | null = null;

  private constructor(
    private readonly gpu: Gpu,
    readonly shape: MoeBlockShape,
    private readonly options: MoeBlockOptions,
    private readonly pipes: {
      router: Pipe;
      /** moe_router_fused for the block's dtype; null where it is off or did not compile. */
      routerFused: Pipe | null;
      /** moe_router_norm; null where the one-pass router or its norm is off, or did not compile. */
      routerNorm: Pipe | null;
      /** moe_router_logits; null where the split router is off or did not compile. */
      routerLogits: Pipe | null;
      /**
       * moe_router_logits' staged forms (`f16-s16`, `f16-s32`; stagedRouterLogitsVariant) for
       * split steps of STAGED_ROUTER_MIN_TOKENS tokens or more; empty where they do not apply.
       */
      routerLogitsStaged: ReadonlyMap<string, Pipe>;
      dispatch: Pipe;
      /** moe_route_dispatch; null where it is off or did not compile. */
      routeDispatch: Pipe | null;
      gateUp: ReadonlyMap<string, Pipe>;
      /** moe_gemm_gate_up_routed in batch-1's gate/up form; null where it is off or not compiled. */
      gateUpRouted: Pipe | null;
      down: ReadonlyMap<string, Pipe>;
      /** moe_gemm_down_combine in the block's layout; null where it is off or not compiled. */
      downCombine: Pipe | null;
      combine: Pipe;
      combineNorm: Pipe;
      tc: TcPipes | null;
    },
    private readonly params: Record<
      | "router"
      | "routerFused"
      | "routerNorm"
      | "routerLogits"
      | "dispatch"
      | "routeDispatch"
      | "gateUp"
      | "gateUpRouted"
      | "down"
      | "downCombine"
      | "combine"
      | "combineNorm"
      | "gather"
      | "cast"
      | "gateUpTc"
      | "downTc",
      GPUBuffer
    >,
    readonly scratch: MoeBlockScratch,
  ) {}

  /** Compiles the pipelines and allocates scratch; throws on a shape the kernels refuse. */
  static async create(
    gpu: Gpu,
    shape: MoeBlockShape,
    options: MoeBlockOptions = {},
  ): Promise<MoeBlock> {
    const { hidden, inter, experts, topK, maxTokens } = shape;
    router.moeRouterParams({ tokens: maxTokens, experts, topK, normTopk: shape.normTopk });
    gateUp.moeGemmGateUpParams(hidden, inter, 0);
    down.moeGemmDownParams(hidden, inter, 0);
    const blockM = options.blockM ?? dispatch.MOE_BLOCK_M;
    dispatch.moeDispatchParams({
      tokens: maxTokens,
      topK,
      experts,
      blockM,
      gridXGateUp: 1,
      gridXDown: 1,
    });
    if (shape.expertTiles) {
      if (shape.dtype !== "f16") throw new Error("moe block: expert weights in tiles are f16 only");
      if (!moeExpertsFitTiles(hidden, inter)) {
        throw new Error(
          `moe block: expert weights in tiles need hidden and inter multiples of 64 (have ${hidden}, ${inter})`,
        );
      }
    }
    // a 16-byte-word form only where both GEMMs' reduction widths are whole words
    const fitsWords = (v: Variant) => wideWordsFit(v, hidden) && wideWordsFit(v, inter);
    const asked = options.gemm && options.gemm !== "auto" ? layoutForm(shape, options.gemm) : null;
    const askedVariant = asked ? gateUp.spec.variants.find((v) => v.name === asked) : undefined;
    if (asked && !askedVariant) {
      throw new Error(
        `moe block: GEMM form ${asked} does not exist${
          shape.expertTiles ? " (with the expert weights in tiles: the form has no tiled twin)" : ""
        }`,
      );
    }
    if (askedVariant && !fitsWords(askedVariant)) {
      throw new Error(
        `moe block: GEMM form ${asked} reads 16-byte words of 8 values: hidden and inter must be ` +
          `multiples of 8 (have ${hidden}, ${inter})`,
      );
    }
    const names = asked
      ? [asked]
      : gateUp.spec.variants.filter((v) =>
        v.dtype === shape.dtype && !!v.expertTiles === !!shape.expertTiles &&
        fitsWords(v) &&
        unsupportedReason(gpu, v) === null
      ).map((v) => v.name);
    if (names.length === 0) throw new Error(`moe block: no ${shape.dtype} GEMM variant runs here`);
    const pipe = <F extends ParamFields>(spec: Parameters<typeof getPipeline<F>>[1], v: string) =>
      getPipeline(gpu, spec, variantByName(spec, v)) as unknown as Promise<Pipe>;
    const gateUpPipes = new Map<string, Pipe>();
    const downPipes = new Map<string, Pipe>();
    for (const name of names) {
      if (variantByName(gateUp.spec, name).dtype !== shape.dtype) {
        throw new Error(`moe block: GEMM variant ${name} does not store ${shape.dtype} weights`);
      }
    }
    // every variant's pair compiled concurrently (a driver may compile them in parallel)
    const built = await Promise.allSettled(
      names.map((name) => Promise.all([pipe(gateUp.spec, name), pipe(down.spec, name)])),
    );
    built.forEach((b, i) => {
      const name = names[i];
      if (b.status === "fulfilled") {
        gateUpPipes.set(name, b.value[0]);
        downPipes.set(name, b.value[1]);
        return;
      }
      // With "auto", a variant this driver cannot compile is left out (said once), so the
      // block still runs on the others; a variant asked for by name must compile.
      if (options.gemm && options.gemm !== "auto") throw b.reason;
      console.error(`moe block: GEMM variant ${name} left out: ${(b.reason as Error).message}`);
    });
    if (gateUpPipes.size === 0) {
      throw new Error(`moe block: no ${shape.dtype} GEMM variant compiles here`);
    }
    for (const [option, form] of Object.entries(options.decodeForms ?? {})) {
      const name = layoutForm(shape, `${shape.dtype}-${form}`);
      const v = gateUp.spec.variants.find((x) => x.name === name);
      if (!form || (v && laneGroupColumns(v) !== null && gateUpPipes.has(name))) continue;
      throw new Error(
        `moe block: decodeForms.${option} '${form}' is no decode GEMM form that runs here (${
          [...gateUpPipes.keys()].filter((n) => laneGroupColumns(variantByName(gateUp.spec, n)))
            .join(", ")
        })`,
      );
    }
    // the routed twin of the gate/up form a batch-1 step takes (setTokens' choice at 1 token)
    const routedPipe_ = gateUpRoutedPipe(
      gpu,
      options,
      decodeFormFor(shape, options, [...gateUpPipes.keys()], 1, "gate_up"),
    );
    // the block's other pipelines, concurrently
    const [
      tc,
      fusedRouter,
      routerPipe,
      routerLogitsPipe,
      routerLogitsStagedPipes,
      dispatchPipe,
      routeDispatchPipe_,
      combinePipe,
      combineNormPipe,
      downCombinePipe_,
    ] = await Promise.all([
      tensorCorePipes(gpu, shape, options, blockM),
      fusedRouterPipe(gpu, shape, options),
      // a subgroup a token where subgroups run (no barriers), else a workgroup a token
      pipe(
        router.spec,
        unsupportedReason(gpu, variantByName(router.spec, "f32-sg")) === null ? "f32-sg" : "f32",
      ),
      splitRouterPipe(gpu, shape, options),
      stagedRouterPipes(gpu, shape, options),
      pipe(dispatch.spec, "f32"),
      routeDispatchPipe(gpu, options),
      pipe(combine.spec, "f32"),
      pipe(combineNorm.spec, combineNorm.moeCombineNormVariant(gpu, shape.dtype)),
      downCombinePipe(gpu, shape, options),
    ]);
    // (the fused router's norm only where the fused router compiled)
    const routerNormPipe_ = fusedRouter ? await routerNormPipe(gpu, options) : null;
    const pipes = {
      router: routerPipe,
      gateUpRouted: await routedPipe_,
      routerFused: fusedRouter,
      routerNorm: routerNormPipe_,
      routerLogits: routerLogitsPipe,
      routerLogitsStaged: routerLogitsStagedPipes,
      dispatch: dispatchPipe,
      routeDispatch: routeDispatchPipe_,
      gateUp: gateUpPipes,
      down: downPipes,
      downCombine: downCombinePipe_,
      combine: combinePipe,
      combineNorm: combineNormPipe,
      tc,
    };
    const d = gpu.device;
    const uniform = (label: string, size: number) =>
      d.createBuffer({ label, size, usage: BufferUsage.UNIFORM | BufferUsage.COPY_DST });
    const params = {
      router: uniform("moe_router.params", router.spec.params.size),
      routerFused: uniform("moe_router_fused.params", routerFused.spec.params.size),
      routerNorm: uniform("moe_router_norm.params", routerNorm.spec.params.size),
      routerLogits: uniform("moe_router_logits.params", routerLogits.spec.params.size),
      dispatch: uniform("moe_dispatch.params", dispatch.spec.params.size),
      routeDispatch: uniform("moe_route_dispatch.params", routeDispatch.spec.params.size),
      gateUp: uniform("moe_gemm_gate_up.params", gateUp.spec.params.size),
      gateUpRouted: uniform("moe_gemm_gate_up_routed.params", gateUpRouted.spec.params.size),
      down: uniform("moe_gemm_down.params", down.spec.params.size),
      downCombine: uniform("moe_gemm_down_combine.params", downCombine.spec.params.size),
      combine: uniform("moe_combine.params", combine.spec.params.size),
      combineNorm: uniform("moe_combine_norm.params", combineNorm.spec.params.size),
      gather: uniform("moe_gather_f16.params", gatherF16.spec.params.size),
      cast: uniform("cast_f16.params", castF16.spec.params.size),
      gateUpTc: uniform("moe_gemm_gate_up_tc.params", gateUpTc.spec.params.size),
      downTc: uniform("moe_gemm_down_tc.params", downTc.spec.params.size),
    };
    const rows = maxTokens * topK;
    const maxItems = dispatch.moeMaxWorkItems(rows, experts, blockM);
    const scratch: MoeBlockScratch = {
      topkIds: createStorage(d, "moe.topk_ids", rows * 4),
      topkWeights: createStorage(d, "moe.topk_weights", rows * 4),
      expertOffsets: createStorage(d, "moe.expert_offsets", (experts + 1) * 4),
      sortedToken: createStorage(d, "moe.sorted_token", rows * 4),
      rowOf: createStorage(d, "moe.row_of", rows * 4),
      workItems: createStorage(d, "moe.work_items", (1 + maxItems) * 16),
      dispatchArgs: createStorage(d, "moe.dispatch_args", 24, STORAGE_USAGE | BufferUsage.INDIRECT),
      act: createStorage(d, "moe.act", rows * inter * 4),
      y: createStorage(d, "moe.y", rows * hidden * 4),
      a16: tc ? createStorage(d, "moe.a16", (rows + MOE_TC_PAD_ROWS) * hidden * 2) : null,
      act16: tc ? createStorage(d, "moe.act16", (rows + MOE_TC_PAD_ROWS) * inter * 2) : null,
      tile: createStorage(
        d,
        "moe.tile",
        tc?.decode
          ? 4 * decodeTileFloats(
            shape,
            options.tensorCoreRowsPerExpert ?? MOE_TC_ROWS_PER_EXPERT,
            tc.decode.gateUp.variant.consts!.CW,
            tc.decode.down.variant.consts!.CW,
            gateUpTc.moeTcItemRows(tc.decode.gateUp.variant),
          )
          : 16,
      ),
      placeholder: createStorage(d, "moe.placeholder", 16),
    };
    return new MoeBlock(gpu, shape, options, pipes, params, scratch);
  }

  /** The GEMM variant the current step uses ("gate_up A, down B" where they differ). */
  get gemmVariant(): string {
    return this.gateUpName === this.downName
      ? this.gateUpName
      : `gate_up ${this.gateUpName}, down ${this.downName}`;
  }

  /**
   * Writes the params of a step of `tokens` tokens (queue writes, ordered before the next
   * submit); every layer encoded for that submit uses them.
   */
  setTokens(
    tokens: number,
    { residualPartials = 0, normF16 = false, normF32 = true, normNext = false }: {
      /** Split-K partial sums the residual owes moe_router_norm (MoeBlockIo.routerNorm). */
      readonly residualPartials?: number;
      /** moe_combine_norm also writes the normed rows in the storage type (norm.out16). */
      readonly normF16?: boolean;
      /**
       * moe_combine_norm writes the f32 normed rows (norm.out; default true). False with normF16
       * where the caller reads only the f16 rows: norm.out is then not written (at 16384 tokens
       * 128 MB a layer less).
       */
      readonly normF32?: boolean;
      /**
       * moe_gemm_down_combine also leaves the next layer's weighted input and the residual's
       * squares (MoeBlockIo.nextNorm), in a step that combines in the down GEMM.
       */
      readonly normNext?: boolean;
    } = {},
  ): void {
    const s = this.shape;
    if (!Number.isInteger(tokens) || tokens < 0 || tokens > s.maxTokens) {
      throw new Error(`moe block: tokens = ${tokens} must be in 0..${s.maxTokens}`);
    }
    if (!Number.isInteger(residualPartials) || residualPartials < 0) {
      throw new Error(`moe block: residualPartials = ${residualPartials} must be a count`);
    }
    if (residualPartials > 0 && !this.takesPartialsAt(tokens)) {
      throw new Error(
        `moe block: a step of ${tokens} tokens runs neither moe_router_norm nor ` +
          `moe_router_logits with moe_gemm_down_combine, which add the residual's partial sums`,
      );
    }
    if (!normF32 && !normF16) {
      throw new Error("moe block: normF32 false needs normF16 (the normed rows go somewhere)");
    }
    if (normNext && !this.leavesNextInputAt(tokens)) {
      throw new Error(
        `moe block: a step of ${tokens} tokens does not run moe_gemm_down_combine, which leaves ` +
          "the next layer's input (normNext), or its hidden size is no whole words",
      );
    }
    // the params depend on these alone: a step like the last keeps them
    if (
      tokens === this.tokens && residualPartials === this.residualPartials &&
      normF16 === this.normF16 && normF32 === this.normF32 && normNext === this.normNext
    ) {
      return;
    }
    this.residualPartials = residualPartials;
    this.normF16 = normF16;
    this.normF32 = normF32;
    this.normNext = normNext;
    const write = <F extends ParamFields>(
      buffer: GPUBuffer,
      layout: { pack(v: ParamValues<F>): Uint8Array },
      v: ParamValues<F>,
    ) => writeBuffer(this.gpu.device, buffer, 0, layout.pack(v));
    const tc = this.tensorCoreFor(tokens);
    this.stepTc = tc;
    this.stepCombineY16 = tc !== null && tc === this.pipes.tc!.prefill
      ? this.pipes.tc!.combineY16
      : null;
    // work items as long as the step's expert GEMMs take (f16-tcp4x2: 128 rows; the scratch
    // holds the items of the block's own blockM, at most 64: never fewer)
    const blockM = tc
      ? gateUpTc.moeTcItemRows(tc.gateUp.variant)
      : this.options.blockM ?? dispatch.MOE_BLOCK_M;
    const maxItems = dispatch.moeMaxWorkItems(tokens * s.topK, s.experts, blockM);
    // the expert GEMMs' params, and their grid x for the dispatch's indirect arguments
    let gridX: [number, number];
    // (every step sets it: a step off the tensor cores after a prefill step reads x)
    this.castRows = tc !== null && gateUpTc.readsTokenRows(tc.gateUp.variant);
    if (tc) {
      this.gateUpName = tc.gateUp.variant.name;
      this.downName = tc.down.variant.name;
      const tcGu = gateUpTc.moeGemmGateUpTcParams(s.hidden, s.inter, maxItems);
      const tcDn = downTc.moeGemmDownTcParams(s.hidden, s.inter, maxItems);
      if (this.castRows) {
        // the token rows once in f16 (the GEMM reads each through the expert order), not
        // each row k times in expert order: at 16384 tokens 64 MB written, not 512 MB
        const cp = castF16.castF16Params(tokens, tokens, s.hidden);
        write(this.params.cast, castF16.spec.params, cp);
        this.castGrid = castF16.spec.grid(cp, this.pipes.tc!.cast.variant, this.gpu);
      } else {
        const gp = gatherF16.moeGatherF16Params(s.hidden, tokens * s.topK + MOE_TC_PAD_ROWS);
        write(this.params.gather, gatherF16.spec.params, gp);
        this.gatherGrid = gatherF16.spec.grid(gp, this.pipes.tc!.gather.variant, this.gpu);
      }
      write(this.params.gateUpTc, gateUpTc.spec.params, tcGu);
      write(this.params.downTc, downTc.spec.params, tcDn);
      gridX = [
        gateUpTc.spec.grid(tcGu, tc.gateUp.variant, this.gpu)[0],
        downTc.spec.grid(tcDn, tc.down.variant, this.gpu)[0],
      ];
    } else {
      const names = [...this.pipes.gateUp.keys()];
      this.gateUpName = decodeFormFor(s, this.options, names, tokens, "gate_up");
      this.downName = decodeFormFor(s, this.options, names, tokens, "down");
      const guParams = gateUp.moeGemmGateUpParams(s.hidden, s.inter, maxItems);
      const dnParams = down.moeGemmDownParams(s.hidden, s.inter, maxItems);
      write(this.params.gateUp, gateUp.spec.params, guParams);
      write(this.params.down, down.spec.params, dnParams);
      gridX = [
        gateUp.spec.grid(guParams, this.pipes.gateUp.get(this.gateUpName)!.variant, this.gpu)[0],
        down.spec.grid(dnParams, this.pipes.down.get(this.downName)!.variant, this.gpu)[0],
      ];
    }
    const rp = router.moeRouterParams({
      tokens,
      experts: s.experts,
      topK: s.topK,
      normTopk: s.normTopk,
    });
    // the split router reads the residual's partial sums without writing them back: the combine
    // adds them (moe_gemm_down_combine where the step combines in the down GEMM)
    const combinePartials = this.takesSplitPartialsAt(tokens) ? residualPartials : 0;
    const cp = combine.moeCombineParams(tokens, s.hidden, s.topK, combinePartials);
    if (this.routesInOnePassAt(tokens)) {
      const fusedShape = {
        tokens,
        experts: s.experts,
        hidden: s.hidden,
        topK: s.topK,
        normTopk: s.normTopk,
      };
      write(
        this.params.routerFused,
        routerFused.spec.params,
        routerFused.moeRouterFusedParams(fusedShape),
      );
      if (this.pipes.routerNorm) {
        write(
          this.params.routerNorm,
          routerNorm.spec.params,
          routerNorm.moeRouterNormParams(fusedShape, s.rmsNormEps ?? 1e-6, residualPartials),
        );
      }
    }
    if (this.splitsRouterAt(tokens)) {
      const lp = routerLogits.moeRouterLogitsParams(
        { tokens, experts: s.experts, hidden: s.hidden },
        s.rmsNormEps ?? 1e-6,
        residualPartials,
      );
      write(this.params.routerLogits, routerLogits.spec.params, lp);
      const staged = tokens >= routerLogits.STAGED_ROUTER_MIN_TOKENS
        ? this.pipes.routerLogitsStaged.get(routerLogits.stagedRouterLogitsVariant(tokens).name)
        : undefined;
      this.splitPipe = staged ?? this.pipes.routerLogits!;
      this.routerLogitsGrid = routerLogits.spec.grid(lp, this.splitPipe.variant, this.gpu);
    }
    write(this.params.router, router.spec.params, rp);
    const dispatchShape = {
      tokens,
      topK: s.topK,
      experts: s.experts,
      blockM,
      gridXGateUp: gridX[0],
      gridXDown: gridX[1],
    };
    write(this.params.dispatch, dispatch.spec.params, dispatch.moeDispatchParams(dispatchShape));
    this.routedStep = this.routesInGateUpAt(tokens);
    if (this.routedStep) {
      const rp = gateUpRouted.moeGemmGateUpRoutedParams(
        { experts: s.experts, topK: s.topK, normTopk: s.normTopk },
        s.hidden,
        s.inter,
        { gateUp: gridX[0], down: gridX[1] },
      );
      write(this.params.gateUpRouted, gateUpRouted.spec.params, rp);
      this.routedGrid = gateUpRouted.spec.grid(rp, this.pipes.gateUpRouted!.variant, this.gpu);
    }
    if (this.routesAndDispatchesAt(tokens)) {
      write(
        this.params.routeDispatch,
        routeDispatch.spec.params,
        routeDispatch.moeRouteDispatchParams({
          tokens,
          experts: s.experts,
          topK: s.topK,
          normTopk: s.normTopk,
        }, dispatchShape),
      );
    }
    this.combinedStep = this.combinesInDownAt(tokens);
    if (this.combinedStep) {
      const dp = downCombine.moeGemmDownCombineParams({
        tokens,
        topK: s.topK,
        hidden: s.hidden,
        inter: s.inter,
        partials: combinePartials,
        normNext,
      });
      write(this.params.downCombine, downCombine.spec.params, dp);
      this.downCombineGrid = downCombine.spec.grid(dp, this.pipes.downCombine!.variant, this.gpu);
    }
    write(this.params.combine, combine.spec.params, cp);
    const np = combineNorm.moeCombineNormParams(
      tokens,
      s.hidden,
      s.topK,
      s.rmsNormEps ?? 1e-6,
      normF16,
      combinePartials,
      normF32,
    );
    write(this.params.combineNorm, combineNorm.spec.params, np);
    this.combineNormGrid = combineNorm.spec.grid(np, this.pipes.combineNorm.variant, this.gpu);
    this.routerGrid = router.spec.grid(rp, this.pipes.router.variant, this.gpu);
    this.tokenGrid = router.spec.grid(rp, router.spec.variants[0], this.gpu);
    this.combineGrid = combine.spec.grid(cp, this.pipes.combine.variant, this.gpu);
    this.tokens = tokens;
  }

  /**
   * Whether the step set by setTokens runs the expert GEMMs' prefill forms, which read the
   * token rows through sorted_token from MoeBlockIo.x16 where given (so nothing reads x then).
   */
  get readsTokenRows(): boolean {
    return this.castRows;
  }

  /**
   * Whether the step set by setTokens computes the router logits itself (moe_router_fused)
   * when encode is given MoeBlockIo.wRouter: the caller then leaves out the router's GEMV.
   */
  get routesInOnePass(): boolean {
    return this.tokens > 0 && this.routesInOnePassAt(this.tokens);
  }

  /**
   * Whether the step set by setTokens takes the layer's input RMSNorm in its one-pass router
   * when encode is given MoeBlockIo.wRouter and routerNorm: the caller then leaves out that
   * rmsnorm.
   */
  get normsInRouter(): boolean {
    return this.tokens > 0 && this.normsInRouterAt(this.tokens);
  }

  /**
   * Whether a step of `tokens` tokens takes the input RMSNorm in its router (one-pass or
   * split).
   */
  normsInRouterAt(tokens: number): boolean {
    return this.splitsRouterAt(tokens) ||
      (this.pipes.routerNorm !== null && this.onePassAt(tokens));
  }

  /**
   * Whether a step of `tokens` tokens runs moe_router_norm (given MoeBlockIo.wRouter and
   * routerNorm), which can add the residual's split-K partial sums (setTokens).
   */
  takesResidualPartialsAt(tokens: number): boolean {
    return this.pipes.routerNorm !== null && this.onePassAt(tokens) &&
      !this.splitsRouterAt(tokens);
  }

  /** Whether a step of `tokens` tokens takes the residual's split-K partial sums at all. */
  takesPartialsAt(tokens: number): boolean {
    return this.takesResidualPartialsAt(tokens) || this.takesSplitPartialsAt(tokens);
  }

  /**
   * Whether a step of `tokens` tokens takes the residual's split-K partial sums (setTokens;
   * MoeBlockIo.routerNorm.partials) in moe_router_logits, which norms the residual with them,
   * and adds them to it in its combine (moe_gemm_down_combine, moe_combine or
   * moe_combine_norm).
   */
  takesSplitPartialsAt(tokens: number): boolean {
    return this.splitsRouterAt(tokens);
  }

  /**
   * Whether a step of `tokens` tokens computes its router logits itself, given
   * MoeBlockIo.wRouter (in one pass, or split over the GPU): the caller leaves out the GEMV.
   */
  routesInOnePassAt(tokens: number): boolean {
    return this.splitsRouterAt(tokens) || this.onePassAt(tokens);
  }

  /** Whether a step of `tokens` tokens routes in one workgroup a token (moe_router_fused/_norm). */
  private onePassAt(tokens: number): boolean {
    return this.pipes.routerFused !== null &&
      tokens >= (this.options.fusedRouterMinTokens ?? MOE_FUSED_ROUTER_MIN_TOKENS) &&
      tokens <= (this.options.fusedRouterMaxTokens ?? MOE_FUSED_ROUTER_MAX_TOKENS);
  }

  /**
   * Whether a step of `tokens` tokens takes its input RMSNorm and router logits over the GPU
   * (moe_router_logits), given MoeBlockIo.wRouter and routerNorm.
   */
  splitsRouterAt(tokens: number): boolean {
    return this.pipes.routerLogits !== null &&
      tokens >= (this.options.splitRouterMinTokens ?? MOE_SPLIT_ROUTER_MIN_TOKENS) &&
      tokens <= (this.options.splitRouterMaxTokens ?? MOE_SPLIT_ROUTER_MAX_TOKENS);
  }

  /**
   * moe_router_logits' forms (`f16-w32`, and `f16-s16 / f16-s32 from 3 tokens` where the staged
   * forms run), or null where the split router is off.
   */
  get splitRouterForm(): string | null {
    const lanes = this.pipes.routerLogits?.variant.name;
    if (!lanes) return null;
    const staged = [...this.pipes.routerLogitsStaged.keys()];
    return staged.length
      ? `${lanes} (${staged.join(" / ")} from ${routerLogits.STAGED_ROUTER_MIN_TOKENS} tokens)`
      : lanes;
  }

  /**
   * The block sums of squares a token's row leaves in MoeBlockIo.nextNorm.ssPart (normNext):
   * one a column block of moe_gemm_down_combine's form.
   */
  get downCombineParts(): number {
    const v = this.pipes.downCombine?.variant;
    return v ? downCombine.downCombineSquareParts(v, this.shape.hidden) : 0;
  }

  /**
   * Whether a step of `tokens` tokens, encoded without MoeBlockIo.norm, runs its down GEMM
   * with the combine fused (moe_gemm_down_combine; MoeBlockOptions.downCombineMaxTokens).
   */
  combinesInDownAt(tokens: number): boolean {
    let known = this.combinesAt.get(tokens);
    if (known === undefined) {
      const most = this.options.downCombineMaxTokens ?? MOE_DOWN_COMBINE_MAX_TOKENS;
      known = this.pipes.downCombine !== null && tokens >= 1 && tokens <= most &&
        this.tensorCoreFor(tokens) === null &&
        // (a step whose down GEMM would take a form that is no lane-group form keeps it)
        laneGroupColumns(
            variantByName(
              down.spec,
              decodeFormFor(this.shape, this.options, [...this.pipes.down.keys()], tokens, "down"),
            ),
          ) !== null;
      this.combinesAt.set(tokens, known);
    }
    return known;
  }

  /**
   * Whether a step of `tokens` tokens can leave the next layer's input (setTokens' normNext):
   * it combines in the down GEMM, and the hidden size is whole words of the norm weight (8
   * values), as moe_gemm_down_combine reads it.
   */
  leavesNextInputAt(tokens: number): boolean {
    return this.shape.hidden % 8 === 0 && this.combinesInDownAt(tokens);
  }

  /**
   * Whether a step of `tokens` tokens routes and dispatches in one workgroup
   * (moe_route_dispatch): 1 to routeDispatchMaxTokens tokens that do not route in one pass.
   */
  routesAndDispatchesAt(tokens: number): boolean {
    const most = this.options.routeDispatchMaxTokens ??
      routeDispatch.MOE_ROUTE_DISPATCH_MAX_TOKENS;
    return this.pipes.routeDispatch !== null && tokens >= 1 && tokens <= most &&
      (this.splitsRouterAt(tokens) || !this.onePassAt(tokens));
  }

  /** Whether the step set by setTokens routes and dispatches in one workgroup. */
  get routesAndDispatches(): boolean {
    return this.tokens > 0 && this.routesAndDispatchesAt(this.tokens);
  }

  /**
   * Whether a step of `tokens` tokens ranks its logits inside the gate/up GEMM
   * (moe_gemm_gate_up_routed) instead of in moe_route_dispatch: a batch-1 step that would take
   * moe_route_dispatch and the gate/up form whose routed twin compiled.
   */
  routesInGateUpAt(tokens: number): boolean {
    const routed = this.pipes.gateUpRouted;
    return routed !== null && tokens === 1 && this.routesAndDispatchesAt(tokens) &&
      this.tensorCoreFor(tokens) === null &&
      decodeFormFor(this.shape, this.options, [...this.pipes.gateUp.keys()], tokens, "gate_up") ===
        routed.variant.name;
  }

  /**
   * The kernel that runs `stage` in the step set by setTokens (a profile's span names it),
   * `normed` when encode is given MoeBlockIo.norm; for the router, the one encode runs (called
   * from encode's pass callback: moe_router_fused or moe_router_norm where the step routes in
   * one pass and encode was given wRouter, and routerNorm for the latter; where it splits its
   * router, moe_router_logits and then the kernel that ranks its logits).
   */
  kernelOf(stage: MoeStage, normed: boolean): string {
    if (stage === "gate_up" && this.routedStep) return gateUpRouted.spec.name;
    if (stage === "router" && this.encodingRouter) return this.encodingRouter;
    if (stage === "router" && this.routesAndDispatches) return "moe_route_dispatch";
    if (stage === "combine" && normed) return "moe_combine_norm";
    if (stage === "down" && !normed && this.combinedStep) {
      return downCombine.spec.name;
    }
    return MOE_STAGE_KERNEL[stage];
  }

  /**
   * The tensor-core pipelines of a step of `tokens` tokens: the prefill forms above
   * tensorCoreRowsPerExpert rows an expert, the decode forms above
   * tensorCoreDecodeRowsPerExpert, else null (the lane-group or FMA forms).
   */
  private tensorCoreFor(tokens: number): TcPair | null {
    const tc = this.pipes.tc;
    if (!tc) return null;
    const form = moeTensorCoreForm(
      (tokens * this.shape.topK) / this.shape.experts,
      this.options.tensorCoreRowsPerExpert,
      tc.decode ? this.options.tensorCoreDecodeRowsPerExpert : -1,
    );
    return form === "tc" ? tc.prefill : form === "tcs" ? tc.decode : null;
  }

  /**
   * Records the block's five dispatches (after setTokens) into `pass`, or into the pass
   * `pass(stage)` returns for each (a profile times every stage in its own pass).
   */
  encode(
    pass: GPUComputePassEncoder | ((stage: MoeStage) => GPUComputePassEncoder),
    io: MoeBlockIo,
  ): void {
    if (this.tokens < 0) throw new Error("moe block: setTokens before encode");
    if (this.tokens === 0) return;
    const passOf = typeof pass === "function" ? pass : () => pass;
    const sc = this.scratch;
    const { gpu, params, pipes } = this;
    const run = (
      stage: MoeStage,
      pipe: Pipe,
      p: GPUBuffer,
      b: Record<string, BufferArg>,
      grid?: readonly number[],
      keySuffix = "",
    ) => {
      const pass = passOf(stage);
      pass.setPipeline(pipe.pipeline);
      let cached = this.bindGroups.get(pipe);
      if (!cached) this.bindGroups.set(pipe, cached = new Map());
      const key = io.key === undefined ? undefined : io.key + keySuffix;
      let group = key === undefined ? undefined : cached.get(key);
      if (!group) {
        group = makeBindGroup(gpu, pipe, p, b);
        if (key !== undefined) cached.set(key, group);
      }
      pass.setBindGroup(0, group);
      if (grid) pass.dispatchWorkgroups(grid[0], grid[1], grid[2]);
      return pass;
    };
    // the router's outputs, then the dispatch's
    const routed = { topk_ids: sc.topkIds, topk_weights: sc.topkWeights };
    const dispatched = {
      expert_offsets: sc.expertOffsets,
      sorted_token: sc.sortedToken,
      row_of: sc.rowOf,
      work_items: sc.workItems,
      dispatch_args: sc.dispatchArgs,
    };
    const wRouter = this.routesInOnePass ? io.wRouter : undefined;
    const norm = wRouter && this.normsInRouter ? io.routerNorm : undefined;
    const split = norm !== undefined && this.splitsRouterAt(this.tokens);
    // (a one-pass router ranks the logits itself, and moe_dispatch follows it)
    const oneWorkgroup = this.routesAndDispatches && (split || wRouter === undefined);
    // (batch 1: the gate/up GEMM's routed twin ranks the logits itself, with no dispatch here)
    const inGateUp = this.routedStep && oneWorkgroup;
    this.encodingRouter = split
      ? "moe_router_logits"
      : norm
      ? "moe_router_norm"
      : wRouter
      ? "moe_router_fused"
      : null;
    const owed = this.residualPartials > 0;
    // (batch 1 without the next layer's norm: the combine inside the down GEMM)
    const fused = !io.norm && this.combinedStep;
    // (the split router reads them; its combine adds them to the residual)
    const owedInSplit = owed && split;
    const owedInCombine = owedInSplit && !fused;
    if (owed && !(wRouter && norm && norm.partials)) {
      throw new Error(
        "moe block: the residual owes partial sums (setTokens) but encode runs neither " +
          "moe_router_norm nor moe_router_logits, given routerNorm.partials",
      );
    }
    // the bind-group key suffix of the kernels that read them
    const owedKey = owed ? partialsKey(norm!.partials!) : "";
    if (split) {
      run(
        "router",
        this.splitPipe!,
        params.routerLogits,
        {
          x: norm.input,
          o_part: owedInSplit ? norm.partials! : sc.placeholder,
          norm_weight: norm.weight,
          w: wRouter!,
          out: io.x,
          logits: io.routerLogits,
        },
        this.routerLogitsGrid,
        owedInSplit ? owedKey : "",
      );
      this.encodingRouter = oneWorkgroup ? "moe_route_dispatch" : "moe_router";
    }
    if (wRouter && norm && !split) {
      run(
        "router",
        pipes.routerNorm!,
        params.routerNorm,
        {
          x: norm.input,
          o_part: owed ? norm.partials! : sc.placeholder,
          norm_weight: norm.weight,
          w: wRouter,
          out: io.x,
          logits: io.routerLogits,
          ...routed,
        },
        this.tokenGrid,
        owedKey,
      );
    } else if (wRouter && !split) {
      run("router", pipes.routerFused!, params.routerFused, {
        x: io.x,
        w: wRouter,
        logits: io.routerLogits,
        ...routed,
      }, this.tokenGrid);
    } else if (inGateUp) {
      // the logits are all the routing this stage writes
    } else if (oneWorkgroup) {
      run("router", pipes.routeDispatch!, params.routeDispatch, {
        logits: io.routerLogits,
        ...routed,
        ...dispatched,
      }, [1, 1, 1]);
    } else {
      run(
        "router",
        pipes.router,
        params.router,
        { logits: io.routerLogits, ...routed },
        this.routerGrid,
      );
    }
    if (!oneWorkgroup) {
      run("dispatch", pipes.dispatch, params.dispatch, {
        topk_ids: sc.topkIds,
        ...dispatched,
      }, [dispatch.moeDispatchWorkgroups(this.tokens * this.shape.topK), 1, 1]);
    }
    const tc = this.stepTc;
    if (tc) {
      // the gate/up GEMM's f16 rows: the caller's copy, or x cast, or x gathered in expert order
      const x16 = this.castRows ? io.x16 : undefined;
      if (!this.castRows) {
        run("gate_up", pipes.tc!.gather, params.gather, {
          x: io.x,
          sorted_token: sc.sortedToken,
          work_items: sc.workItems,
          out: sc.a16!,
        }, this.gatherGrid);
      } else if (!x16) {
        run("gate_up", pipes.tc!.cast, params.cast, { x: io.x, out: sc.a16! }, this.castGrid);
      }
      run(
        "gate_up",
        tc.gateUp,
        params.gateUpTc,
        {
          a: x16 ?? sc.a16!,
          w: io.wGateUp,
          work_items: sc.workItems,
          act: sc.act16!,
          tile: sc.tile,
          sorted_token: sc.sortedToken,
        },
        undefined,
        x16 ? "x16" : "",
      ).dispatchWorkgroupsIndirect(
        sc.dispatchArgs,
        dispatch.MOE_ARGS_GATE_UP,
      );
      // (y or y16: the binding the form writes takes y, the other one 16 bytes, unwritten)
      run("down", tc.down, params.downTc, {
        act: sc.act16!,
        w: io.wDown,
        work_items: sc.workItems,
        y: this.stepCombineY16 ? sc.placeholder : sc.y,
        tile: sc.tile,
        y16: this.stepCombineY16 ? sc.y : sc.placeholder,
      }).dispatchWorkgroupsIndirect(sc.dispatchArgs, dispatch.MOE_ARGS_DOWN);
    } else {
      if (inGateUp) {
        run("gate_up", pipes.gateUpRouted!, params.gateUpRouted, {
          logits: io.routerLogits,
          x: io.x,
          w: io.wGateUp,
          act: sc.act,
          ...routed,
          row_of: sc.rowOf,
          work_items: sc.workItems,
          dispatch_args: sc.dispatchArgs,
        }, this.routedGrid);
      } else {
        run("gate_up", pipes.gateUp.get(this.gateUpName)!, params.gateUp, {
          x: io.x,
          w: io.wGateUp,
          sorted_token: sc.sortedToken,
          work_items: sc.workItems,
          act: sc.act,
        }).dispatchWorkgroupsIndirect(sc.dispatchArgs, dispatch.MOE_ARGS_GATE_UP);
      }
      if (fused) {
        if (this.normNext && !io.nextNorm) {
          throw new Error(
            "moe block: setTokens asked for the next layer's input (normNext) but encode was " +
              "given no nextNorm",
          );
        }
        const next = this.normNext ? io.nextNorm : undefined;
        // the down GEMM adds the token's weighted expert rows to the residual: no combine
        run(
          "down",
          pipes.downCombine!,
          params.downCombine,
          {
            act: sc.act,
            w: io.wDown,
            topk_ids: sc.topkIds,
            topk_weights: sc.topkWeights,
            row_of: sc.rowOf,
            o_part: owedInSplit ? norm!.partials! : sc.placeholder,
            residual: io.residual,
            // (unwritten without normNext: scratch this dispatch binds nowhere else)
            norm_next: next ? next.weight : sc.placeholder,
            h: next ? next.h : sc.y,
            ss_part: next ? next.ssPart : sc.tile,
          },
          this.downCombineGrid,
          `${owedInSplit ? owedKey : ""}${next ? "n" : ""}`,
        );
        return;
      }
      const dn = pipes.down.get(this.downName)!;
      run("down", dn, params.down, { act: sc.act, w: io.wDown, work_items: sc.workItems, y: sc.y })
        .dispatchWorkgroupsIndirect(sc.dispatchArgs, dispatch.MOE_ARGS_DOWN);
    }
    // (the -y16 forms read the rows as f16 from y16, the others as f32 from y: the same buffer
    // either way, the other binding unread)
    const y16 = this.stepCombineY16;
    if (io.norm) {
      if (this.normF16 && !io.norm.out16) {
        throw new Error(
          "moe block: setTokens asked for f16 rows (normF16) but norm.out16 is missing",
        );
      }
      run(
        "combine",
        y16?.combineNorm ?? pipes.combineNorm,
        params.combineNorm,
        {
          y: sc.y,
          y16: sc.y,
          row_of: sc.rowOf,
          topk_weights: sc.topkWeights,
          residual: io.residual,
          // (unread without partials: y, read-only here already)
          o_part: owedInCombine ? norm!.partials! : sc.y,
          weight: io.norm.weight,
          // (unwritten without normF32)
          out: this.normF32 ? io.norm.out : sc.placeholder,
          out16: this.normF16 ? io.norm.out16! : sc.placeholder,
        },
        this.combineNormGrid,
        `${this.normF16 ? "h" : ""}${this.normF32 ? "" : "o"}${owedInCombine ? owedKey : ""}`,
      );
    } else {
      run(
        "combine",
        y16?.combine ?? pipes.combine,
        params.combine,
        {
          y: sc.y,
          y16: sc.y,
          row_of: sc.rowOf,
          topk_weights: sc.topkWeights,
          residual: io.residual,
          // (unread without partials: y, read-only here already)
          o_part: owedInCombine ? norm!.partials! : sc.y,
        },
        this.combineGrid,
        owedInCombine ? owedKey : "",
      );
    }
  }

  /** Frees the scratch and params buffers (pipelines stay cached). */
  destroy(): void {
    for (const b of Object.values(this.scratch)) b?.destroy();
    for (const b of Object.values(this.params)) b.destroy();
  }
}

/**
 * The FMA grouped-GEMM form a step of `tokens` tokens takes for `stage`, of the compiled
 * `names`: moeGemmVariantFor's order in the block's weight layout, led by
 * MoeBlockOptions.decodeForms where a decode form is chosen.
 */
function decodeFormFor(
  shape: MoeBlockShape,
  options: MoeBlockOptions,
  names: readonly string[],
  tokens: number,
  stage: "gate_up" | "down",
): string {
  const order = moeGemmVariantFor(
    shape.dtype,
    tokens,
    shape.topK,
    shape.experts,
    options.packedF16,
    stage,
  );
  const form = stage === "gate_up" ? options.decodeForms?.gateUp : options.decodeForms?.down;
  if (form && laneGroupColumns(variantByName(gateUp.spec, order[0])) !== null) {
    order.unshift(`${shape.dtype}-${form}`);
  }
  return order.map((n) => layoutForm(shape, n)).find((n) => names.includes(n)) ?? names[0];
}

/**
 * moe_gemm_gate_up_routed in gate/up form `form` (batch-1's), or null where it is off
 * (routedGateUp false, moe_route_dispatch off), the form has no routed twin (not a lane-group
 * decode form), the device binds fewer storage buffers a stage than it needs, or it does not
 * compile here (said once).
 */
async function gateUpRoutedPipe(
  gpu: Gpu,
  options: MoeBlockOptions,
  form: string,
): Promise<Pipe | null> {
  if (options.routedGateUp === false || options.routeDispatchMaxTokens === 0) return null;
  const v = gateUpRouted.spec.variants.find((x) => x.name === form);
  const buffers = gpu.limits.maxStorageBuffersPerShaderStage ?? 8;
  // (every binding of the kernel is a storage buffer; its params are a uniform)
  if (!v || buffers < gateUpRouted.spec.bindings.length) return null;
  return await optionalPipe(gpu, gateUpRouted.spec, v, "batch-1 routing in the gate/up GEMM");
}

/**
 * moe_route_dispatch's pipeline, or null where it is off (routeDispatchMaxTokens 0), its
 * workgroup memory passes the device's limit, or it does not compile here (said once).
 */
async function routeDispatchPipe(gpu: Gpu, options: MoeBlockOptions): Promise<Pipe | null> {
  const most = options.routeDispatchMaxTokens ?? routeDispatch.MOE_ROUTE_DISPATCH_MAX_TOKENS;
  const limit = routeDispatch.MOE_ROUTE_DISPATCH_TOKENS_LIMIT;
  if (!Number.isInteger(most) || most < 0 || most > limit) {
    throw new Error(
      `moe block: routeDispatchMaxTokens ${most} must be an integer in 0..${limit} (one ` +
        `workgroup routes its tokens, a few at a time)`,
    );
  }
  if (most === 0) return null;
  // the subgroup form where it runs (a subgroup a token: k rounds of two reductions), else f32
  const sg = variantByName(routeDispatch.spec, "f32-sg");
  return await optionalPipe(
    gpu,
    routeDispatch.spec,
    unsupportedReason(gpu, sg) === null ? sg : routeDispatch.spec.variants[0],
    "routing and dispatch in one workgroup",
  );
}

/**
 * moe_router_fused's pipeline for the block's dtype, or null where it is off
 * (fusedRouterMaxTokens 0) or does not compile here (said once).
 */
async function fusedRouterPipe(
  gpu: Gpu,
  shape: MoeBlockShape,
  options: MoeBlockOptions,
): Promise<Pipe | null> {
  const fewest = options.fusedRouterMinTokens ?? MOE_FUSED_ROUTER_MIN_TOKENS;
  if (!Number.isInteger(fewest) || fewest < 1) {
    throw new Error(`moe block: fusedRouterMinTokens ${fewest} must be a positive integer`);
  }
  if ((options.fusedRouterMaxTokens ?? MOE_FUSED_ROUTER_MAX_TOKENS) <= 0) return null;
  if (shape.dtype !== "f16" || shape.hidden % 8 !== 0) return null;
  if (shape.hidden > routerFused.MOE_FUSED_ROUTER_MAX_HIDDEN) return null;
  const v = routerFused.moeRouterFusedVariant(gpu);
  return await optionalPipe(gpu, routerFused.spec, v, "the one-pass router");
}

/**
 * moe_router_logits' pipeline, or null where the split router is off (splitRouterMaxTokens
 * 0, fusedRouterNorm false), the block is not f16 or it does not compile here (said once).
 */
async function splitRouterPipe(
  gpu: Gpu,
  shape: MoeBlockShape,
  options: MoeBlockOptions,
): Promise<Pipe | null> {
  const fewest = options.splitRouterMinTokens ?? MOE_SPLIT_ROUTER_MIN_TOKENS;
  if (!Number.isInteger(fewest) || fewest < 1) {
    throw new Error(`moe block: splitRouterMinTokens ${fewest} must be a positive integer`);
  }
  const most = options.splitRouterMaxTokens ?? MOE_SPLIT_ROUTER_MAX_TOKENS;
  if (!Number.isInteger(most) || most < 0) {
    throw new Error(`moe block: splitRouterMaxTokens ${most} must be a count`);
  }
  if (most === 0 || options.fusedRouterNorm === false) return null;
  if (shape.dtype !== "f16" || shape.hidden % 8 !== 0) return null;
  return await optionalPipe(
    gpu,
    routerLogits.spec,
    routerLogits.moeRouterLogitsVariant(gpu),
    "the split router",
  );
}

/**
 * moe_router_logits' staged forms by name (`f16-s16`, `f16-s32`) for the split steps they take
 * (stagedRouterLogitsVariant over STAGED_ROUTER_MIN_TOKENS or splitRouterMinTokens up to
 * splitRouterMaxTokens), or none where no split step reaches them, the block is not f16, its rows
 * do not fit their workgroup memory (hidden past STAGED_MAX_HIDDEN) or they do not compile here
 * (said once).
 */
async function stagedRouterPipes(
  gpu: Gpu,
  shape: MoeBlockShape,
  options: MoeBlockOptions,
): Promise<ReadonlyMap<string, Pipe>> {
  const fewest = Math.max(
    options.splitRouterMinTokens ?? MOE_SPLIT_ROUTER_MIN_TOKENS,
    routerLogits.STAGED_ROUTER_MIN_TOKENS,
  );
  const most = options.splitRouterMaxTokens ?? MOE_SPLIT_ROUTER_MAX_TOKENS;
  if (
    most < fewest || options.fusedRouterNorm === false || shape.dtype !== "f16" ||
    shape.hidden % 8 !== 0 || shape.hidden > routerLogits.STAGED_MAX_HIDDEN
  ) {
    return new Map();
  }
  const forms = new Set(
    [fewest, most].map((t) => routerLogits.stagedRouterLogitsVariant(t)),
  );
  const pipes = await Promise.all(
    [...forms].map(async (v) =>
      [v.name, await optionalPipe(gpu, routerLogits.spec, v, "the staged split router")] as const
    ),
  );
  return new Map(pipes.filter((e): e is readonly [string, Pipe] => e[1] !== null));
}

/**
 * moe_gemm_down_combine in the block's dtype and layout (16-byte words where the reduction
 * width takes them), in MoeBlockOptions.downCombineForm, or null where it is off
 * (downCombineMaxTokens 0) or does not run or compile here (said once).
 */
async function downCombinePipe(
  gpu: Gpu,
  shape: MoeBlockShape,
  options: MoeBlockOptions,
): Promise<Pipe | null> {
  const most = options.downCombineMaxTokens ?? MOE_DOWN_COMBINE_MAX_TOKENS;
  if (!Number.isInteger(most) || most < 0) {
    throw new Error(`moe block: downCombineMaxTokens ${most} must be a count`);
  }
  if (most === 0) return null;
  const wide = downCombine.spec.variants.find((v) => v.name === `f16-dc-w32c4-ww`)!;
  const form = options.downCombineForm ??
    (unsupportedReason(gpu, wide) === null ? "dc-w32c4" : "dc");
  const base = `${shape.dtype}-${form}`;
  const name = [`${base}-ww`, base].map((n) => layoutForm(shape, n)).find((n) => {
    const v = downCombine.spec.variants.find((x) => x.name === n);
    return v !== undefined && wideWordsFit(v, shape.inter);
  });
  if (!name) {
    throw new Error(
      `moe block: downCombineForm '${form}' is no moe_gemm_down_combine form (${
        [...new Set(downCombine.spec.variants.map((v) => v.name.replace(/^f(16|32)-/, "")))]
          .join(", ")
      })`,
    );
  }
  const v = variantByName(downCombine.spec, name);
  if (options.downCombineForm && unsupportedReason(gpu, v) !== null) {
    throw new Error(
      `moe block: downCombineForm '${form}' cannot run here: ${unsupportedReason(gpu, v)}`,
    );
  }
  return await optionalPipe(gpu, downCombine.spec, v, "the down GEMM's fused combine");
}

/**
 * moe_router_norm's pipeline (the one-pass router's form), or null where it is off
 * (fusedRouterNorm false) or does not compile here (said once).
 */
async function routerNormPipe(gpu: Gpu, options: MoeBlockOptions): Promise<Pipe | null> {
  if (options.fusedRouterNorm === false) return null;
  const v = routerNorm.moeRouterNormVariant(gpu);
  return await optionalPipe(gpu, routerNorm.spec, v, "the router's fused norm");
}

/** A number for each buffer that has held the residual's partial sums (partialsKey below). */
const partialsIds = new WeakMap<GPUBuffer, number>();
let partialsBuffers = 0;

/**
 * The bind-group key suffix of a step that owes partial sums in `partials`: `p` and a number
 * for the buffer, since steps of one layer (one MoeBlockIo.key) take them from different
 * buffers (the one-row o GEMV's parts at batch 1, the tensor-core GEMM's partials past it).
 */
function partialsKey(partials: BufferArg): string {
  const buffer = "buffer" in partials ? partials.buffer : partials;
  let id = partialsIds.get(buffer);
  if (id === undefined) partialsIds.set(buffer, id = partialsBuffers++);
  return `p${id}`;
}

/**
 * `variant`'s pipeline of `spec`, or null where it does not run on this device or does not
 * compile here (`what` is then said left out, once: the block runs without it).
 */
async function optionalPipe<F extends ParamFields>(
  gpu: Gpu,
  spec: KernelSpec<F>,
  variant: Variant,
  what: string,
): Promise<Pipe | null> {
  if (unsupportedReason(gpu, variant) !== null) return null;
  try {
    return await getPipeline(gpu, spec, variant) as unknown as Pipe;
  } catch (err) {
    console.error(`moe block: ${what} left out: ${(err as Error).message}`);
    return null;
  }
}

/**
 * The tensor-core expert GEMMs' pipelines, or null where they do not run (a reason is
 * printed when they fail to compile; asked for with tensorCoreRowsPerExpert > 0 on a device
 * without them, they are simply not used: the FMA forms serve every step).
 */
async function tensorCorePipes(
  gpu: Gpu,
  shape: MoeBlockShape,
  options: MoeBlockOptions,
  blockM: number,
): Promise<TcPipes | null> {
  if ((options.tensorCoreRowsPerExpert ?? MOE_TC_ROWS_PER_EXPERT) <= 0) return null;
  if (options.gemm && options.gemm !== "auto") return null;
  if (shape.dtype !== "f16" || blockM !== dispatch.MOE_BLOCK_M) return null;
  if (!gateUpTc.moeTcFits(shape.hidden, shape.inter)) return null;
  const v = gateUpTc.spec.variants[0];
  if (unsupportedReason(gpu, v) !== null) return null;
  let gather: Pipe, cast: Pipe, prefill: TcPair;
  try {
    gather = await getPipeline(gpu, gatherF16.spec, gatherF16.spec.variants[0]) as unknown as Pipe;
    cast = await getPipeline(gpu, castF16.spec, castF16.spec.variants[0]) as unknown as Pipe;
    prefill = await prefillPair(
      gpu,
      shape,
      layoutForm(shape, options.tensorCorePrefill ?? v.name),
      layoutForm(shape, v.name),
    );
  } catch (err) {
    console.error(`moe block: tensor-core expert GEMMs left out: ${(err as Error).message}`);
    return null;
  }
  let combineY16: TcPipes["combineY16"] = null;
  if (options.downRowsF16) {
    const y16 = await downRowsF16Pipes(gpu, prefill.down.variant.name);
    if (y16) {
      prefill = { gateUp: prefill.gateUp, down: y16.down };
      combineY16 = { combine: y16.combine, combineNorm: y16.combineNorm };
    }
  }
  const made = { gather, cast, prefill, combineY16 };
  if ((options.tensorCoreDecodeRowsPerExpert ?? MOE_TCS_ROWS_PER_EXPERT) < 0) {
    return { ...made, decode: null };
  }
  try {
    return { ...made, decode: await tcPair(gpu, layoutForm(shape, "f16-tcs")) };
  } catch (err) {
    console.error(`moe block: tensor-core decode forms left out: ${(err as Error).message}`);
    return { ...made, decode: null };
  }
}

/**
 * The -y16 twin of the prefill down form `name` and the combines that read its f16 rows
 * (MoeBlockOptions.downRowsF16), or null, saying why, where the form has no twin or one of
 * them does not compile.
 */
async function downRowsF16Pipes(
  gpu: Gpu,
  name: string,
): Promise<{ down: Pipe; combine: Pipe; combineNorm: Pipe } | null> {
  const twin = downTc.y16TwinOf(name);
  if (twin === null) {
    console.error(`moe block: ${name} has no -y16 twin: its rows stay f32`);
    return null;
  }
  const normForm = combineNorm.moeCombineNormVariant(gpu, "f16") + combine.Y16_ROWS_SUFFIX;
  try {
    const [down, c, cn] = await Promise.all([
      getPipeline(gpu, downTc.spec, variantByName(downTc.spec, twin)),
      getPipeline(gpu, combine.spec, variantByName(combine.spec, "f16" + combine.Y16_ROWS_SUFFIX)),
      getPipeline(gpu, combineNorm.spec, variantByName(combineNorm.spec, normForm)),
    ]);
    return {
      down: down as unknown as Pipe,
      combine: c as unknown as Pipe,
      combineNorm: cn as unknown as Pipe,
    };
  } catch (err) {
    console.error(`moe block: f16 down rows left out: ${(err as Error).message}`);
    return null;
  }
}

/**
 * The prefill-sized pair: `asked` where it fits the shape and compiles, else `fallback`
 * (f16-tc), saying why; only the pair used is compiled.
 */
async function prefillPair(
  gpu: Gpu,
  shape: MoeBlockShape,
  asked: string,
  fallback: string,
): Promise<TcPair> {
  if (asked !== fallback) {
    const gu = variantByName(gateUpTc.spec, asked), dn = variantByName(downTc.spec, asked);
    if (
      gateUpTc.moeTcpFits(gu, shape.inter, shape.hidden) &&
      gateUpTc.moeTcpFits(dn, shape.hidden, shape.inter)
    ) {
      try {
        return await tcPair(gpu, asked);
      } catch (err) {
        console.error(
          `moe block: ${asked} left out, ${fallback} instead: ${(err as Error).message}`,
        );
      }
    } else {
      console.error(
        `moe block: ${asked} does not fit hidden ${shape.hidden}, inter ${shape.inter}: ${fallback}`,
      );
    }
  }
  return await tcPair(gpu, fallback);
}

/** The gate/up and down pipelines of the tensor-core expert GEMMs' variant `name`. */
async function tcPair(gpu: Gpu, name: string): Promise<TcPair> {
  return {
    gateUp: await getPipeline(
      gpu,
      gateUpTc.spec,
      variantByName(gateUpTc.spec, name),
    ) as unknown as Pipe,
    down: await getPipeline(gpu, downTc.spec, variantByName(downTc.spec, name)) as unknown as Pipe,
  };
}

/**
 * Which values moeBlockRef rounds to f16 (clamped to its finite range) as the tensor-core path
 * stores them: the token rows (cast_f16 or moe_gather_f16), the SwiGLU activations (the gate/up
 * GEMM's output) and each expert's down row (the down GEMM's -y16 twins).
 */
export interface MoeRefRounding {
  readonly x?: boolean;
  readonly act?: boolean;
  readonly y?: boolean;
}

/** Host inputs of the CPU block reference. */
export interface MoeBlockRefInputs {
  readonly routerLogits: Float32Array;
  readonly x: Float32Array;
  readonly wGateUp: Float32Array;
  readonly wDown: Float32Array;
  readonly residual: Float32Array;
}

/**
 * CPU reference of the whole block, written directly (no permutation): for each token,
 * softmax over its router logits, the top-k experts (ties to the lower index), weights
 * (renormalized over the top k when normTopk), each expert's SwiGLU MLP
 * `down(silu(gate x) * up x)`, and `residual + sum_j w_j * expert_j(x)`.
 * Returns the new residual `[tokens, hidden]`.
 */
export function moeBlockRef(
  inp: MoeBlockRefInputs,
  shape: Omit<MoeBlockShape, "maxTokens" | "dtype">,
  tokens: number,
  f16: MoeRefRounding = {},
): Float32Array {
  const { hidden: H, inter: I, experts: E, topK: k } = shape;
  const out = new Float32Array(inp.residual.subarray(0, tokens * H));
  const act = new Float64Array(I);
  const ffn = new Float64Array(H);
  const f16Of = (v: number) => f16ToF32(f32ToF16(Math.max(-65504, Math.min(65504, v))));
  const x = f16.x ? roundToF16InPlace(clampF16(Float32Array.from(inp.x))) : inp.x;
  for (let t = 0; t < tokens; t++) {
    const logits = inp.routerLogits.subarray(t * E, (t + 1) * E);
    const max = Math.max(...logits);
    const p = Array.from(logits, (l) => Math.exp(l - max));
    const total = p.reduce((a, b) => a + b, 0);
    const order = Array.from({ length: E }, (_, e) => e).sort((a, b) =>
      logits[b] - logits[a] || a - b
    ).slice(0, k);
    const topSum = order.reduce((a, e) => a + p[e], 0);
    const xo = t * H;
    ffn.fill(0);
    for (const e of order) {
      const w = p[e] / (shape.normTopk ? topSum : total);
      for (let c = 0; c < I; c++) {
        const go = (e * 2 * I + c) * H, uo = go + I * H;
        let g = 0, u = 0;
        for (let q = 0; q < H; q++) {
          g += x[xo + q] * inp.wGateUp[go + q];
          u += x[xo + q] * inp.wGateUp[uo + q];
        }
        act[c] = (g / (1 + Math.exp(-g))) * u;
        if (f16.act) act[c] = f16Of(act[c]);
      }
      for (let n = 0; n < H; n++) {
        const wo = (e * H + n) * I;
        let s = 0;
        for (let c = 0; c < I; c++) s += act[c] * inp.wDown[wo + c];
        ffn[n] += w * (f16.y ? f16Of(s) : s);
      }
    }
    for (let n = 0; n < H; n++) out[xo + n] += ffn[n];
  }
  return out;
}
