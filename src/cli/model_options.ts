/**
 * The model options that `replay` and `profile` share (one table, so their --help and
 * defaults agree), and the model and tokenizer they open.
 *
 * ```ts
 * const opts = parseArgs("replay", "...", { ...MODEL_OPTIONS, trace: {...} }, argv);
 * const model = await loadModel(gpu, opts, console.error);
 * ```
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Gpu } from "../gpu/device.ts";
import {
  GpuModel,
  type GpuModelOptions,
  LM_HEAD_FORMS,
  type LmHeadForm,
  MOE_TENSOR_CORE_PREFILL_FORMS,
  type MoeTensorCorePrefillForm,
  type PrefillAttentionForm,
  TENSOR_CORE_PREFILL_FORMS,
  type TensorCorePrefillForm,
} from "../model/gpu_model.ts";
import { type Placement, PLACEMENTS } from "../gpu/buffer_ranges.ts";
import { ModelTokenizer, qwen3TokenizerJsonPath } from "../model/tokenizer.ts";
import { userPath } from "../util/user_path.ts";
import { InputError } from "./run_cli.ts";
import { checkedModel } from "./model_spec.ts";
import type { OptionSpec } from "./args.ts";

/** Options every model-running command of this area takes. */
export const MODEL_OPTIONS = {
  model: {
    type: "string",
    help: "checkpoint folder or synthetic:NAME (synthetic:qwen3-30b-a3b, synthetic:mixtral-8x7b)",
  },
  dtype: {
    type: "string",
    values: ["f16", "f32"],
    help: "weights and KV storage (default: f16 where the adapter has it)",
  },
  kvCacheGb: {
    type: "number",
    min: 0,
    help: "KV cache memory in GiB (default: the model's default)",
  },
  maxNumTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "most tokens a step carries (default: the model's)",
  },
  maxNumSeqs: {
    type: "number",
    integer: true,
    min: 1,
    help: "most sequences a step carries (default: the model's)",
  },
  maxModelLen: {
    type: "number",
    integer: true,
    min: 2,
    help: "model length limit (default: the config's)",
  },
} as const satisfies Record<string, OptionSpec>;

/** The tensor-core GEMM's options (GpuModelOptions.tensorCoreRows / tensorCoreTile). */
export const TENSOR_CORE_OPTIONS = {
  tensorCoreRows: {
    type: "number",
    integer: true,
    min: 0,
    help: "linear layers with at least this many rows run on the tensor cores (f16 subgroup " +
      "matrices), 0 never (default: the model's)",
  },
  tensorCoreTile: {
    type: "string",
    values: ["0", "16", "32", "64"],
    help: "the tensor-core GEMM's rows a workgroup, in gemm_tc's tiles and the staged forms " +
      "alike (0: by rows)",
  },
  tensorCoreDecodeRows: {
    type: "number",
    integer: true,
    min: 0,
    help: "linear layers of up to this many rows (at most 128) on the tensor cores take the " +
      "staged forms (gemm_tcs; default 128, 0 never; more rows take --tensor-core-prefill's form)",
  },
  tensorCoreDecodeSubgroups: {
    type: "string",
    values: ["one", "rows"],
    help: "the staged forms' subgroups a workgroup: one (f16-tcs16/32) or one a row tile of 16 " +
      "(f16-tcs32x2 up to 32 rows, then f16-tcs64x4, in row blocks past 64; the weights staged " +
      "once for every row tile) (default: rows)",
  },
  tensorCorePrefill: {
    type: "string",
    values: TENSOR_CORE_PREFILL_FORMS,
    help: "the tensor-core GEMM past the staged forms' rows: tc (gemm_tc's tiles) or a prefill " +
      "form staging both operands (tcp64x64, tcp128x64, tcp64x128, tcp128x128: rows x columns " +
      "a workgroup) (default: tcp128x128)",
  },
  tensorCorePrefillWide: {
    type: "string",
    values: TENSOR_CORE_PREFILL_FORMS,
    help: "the tensor-core GEMM of steps past 256 rows: tc or a prefill form (those above and " +
      "tcp256x128, tcp128x256; tcp256x128p2, tcp256x128 holding two steps' words in " +
      "registers: a lab form) (default: tcp256x128)",
  },
  lmHeadForms: {
    type: "string",
    help: "the LM head's tensor-core GEMM by sampled rows, ROWS:FORM,... (the first entry " +
      "whose ROWS covers the step's; FORM a gemm_tc form without its f16- prefix) or none " +
      "(the linear layers' choice) (default: " +
      (LM_HEAD_FORMS.map((f) => `${f.maxRows}:${f.variant.slice(4)}`).join(",") || "none") +
      ")",
  },
  tensorCoreSplitMinK: {
    type: "number",
    integer: true,
    min: 64,
    help: "the least k a split-K split of the staged forms takes (a multiple of 64; default " +
      "1024 for the several-subgroup forms of 64 and 128 rows, 512 for tcs32x2 and the " +
      "one-subgroup ones, 256 for the prefill forms up to 128 rows; a staged form past its own " +
      "rows, in row blocks, that times its blocks: tcs64x4 at 65-128 rows 2048)",
  },
  moeTensorCoreRows: {
    type: "number",
    integer: true,
    min: 0,
    help: "MoE steps with more than this many rows an expert run the expert GEMMs on the " +
      "tensor cores (default 8; 0 never)",
  },
  moeTcDecodeRows: {
    type: "number",
    integer: true,
    min: -1,
    help: "MoE steps with more than this many rows an expert (up to --moe-tensor-core-rows) " +
      "run the expert GEMMs' tensor-core decode forms (default 2; -1 never)",
  },
  moeFusedRouterTokens: {
    type: "number",
    integer: true,
    min: 0,
    help: "f16 MoE steps of --moe-fused-router-min-tokens (2) to this many tokens compute the " +
      "router logits and their top-k " +
      "in one dispatch, where the router's GEMV and moe_router take two (default 128; 0 never)",
  },
  moeFusedRouterMinTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "the fewest tokens of an f16 MoE step that routes in one dispatch (default 2; 1: " +
      "batch-1 decode too, the router weight read by one workgroup)",
  },
  moeRouteDispatchTokens: {
    type: "number",
    integer: true,
    min: 0,
    help: "MoE steps of 1 to this many tokens that do not route in one pass take the router's " +
      "top-k and the dispatch in one workgroup, where moe_router and moe_dispatch take two " +
      "(default 16, at most 64; 0 never)",
  },
  moeRoutedGateUp: {
    type: "boolean",
    help: "batch-1 MoE steps rank their router logits inside the gate/up GEMM " +
      "(moe_gemm_gate_up_routed) where its decode form has that twin, one dispatch a layer " +
      "fewer than moe_route_dispatch (default true; --moe-routed-gate-up=false: apart)",
  },
  moeSplitRouterTokens: {
    type: "number",
    integer: true,
    min: 0,
    help: "f16 MoE steps of --moe-split-router-min-tokens (1) to this many tokens take the " +
      "layer's input RMSNorm and the router logits over the GPU (moe_router_logits: a group of " +
      "experts by a token a workgroup), then the top-k in moe_route_dispatch (moe_router past " +
      "--moe-route-dispatch-tokens), where moe_router_norm takes one workgroup a token (default " +
      "16; 0 never)",
  },
  moeSplitRouterMinTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "the fewest tokens of an f16 MoE step that splits its router (default 1)",
  },

  moeCombineNorm: {
    type: "boolean",
    help: "a MoE layer followed by another ends with that layer's input RMSNorm fused into its " +
      "combine, one dispatch a layer fewer (default true; --moe-combine-norm=false: apart)",
  },
  qkvNormInGemv: {
    type: "boolean",
    help: "steps whose qkv projection takes a one-row GEMV form (batch-1 decode) norm each " +
      "layer's input inside it (gemv_norm), and the MoE block adds the experts' rows to the " +
      "residual in its down GEMM (moe_gemm_down_combine), one dispatch a layer fewer (default " +
      "true; --qkv-norm-in-gemv=false: rmsnorm and moe_combine_norm)",
  },
  qkvScaledAfterMoe: {
    type: "boolean",
    help: "in those steps, after a MoE layer whose down GEMM adds to the residual, that kernel " +
      "also leaves the next layer's input weighted by its norm weight and its squares in block " +
      "sums, and the qkv GEMV only scales its sums (gemv_scaled) (default true; " +
      "--qkv-scaled-after-moe=false: gemv_norm in every layer)",
  },
  moeDownCombineTokens: {
    type: "number",
    integer: true,
    min: 0,
    help: "MoE steps of 1 to this many tokens on the lane-group expert forms, whose next layer " +
      "norms its input in the qkv GEMV, run the down GEMM with the combine fused " +
      "(moe_gemm_down_combine; default 1; 0 never)",
  },
  moeDownCombineForm: {
    type: "string",
    values: ["dc", "dc-w32c4", "dc-w32c2", "dc-w32c4-wg128"],
    help: "moe_gemm_down_combine's form: dc (lane groups of 8), dc-w32c4 / dc-w32c2 (a " +
      "32-wide subgroup a rank, 4 or 2 columns), dc-w32c4-wg128 (4 subgroups a workgroup, two " +
      "ranks each) (default dc-w32c4 where subgroups are 32 wide, else dc)",
  },
  oSplitsOneRow: {
    type: "number",
    integer: true,
    min: 1,
    help: "batch-1 steps whose qkv GEMV norms its input, of models of MoE layers alone, run the " +
      "o projection's GEMV in this many split-K parts, whose partial sums moe_router_logits and " +
      "moe_gemm_down_combine add (default 1, unsplit: 2, 4 and 8 parts measured slower on the H200; at most 16)",
  },
  qkvPartialsInRope: {
    type: "boolean",
    help: "steps whose qkv projection splits k on the tensor cores leave its partial sums for " +
      "qk_norm_rope_cache to add up, one splitk_reduce dispatch a layer fewer (default true; " +
      "--qkv-partials-in-rope=false: the reduce)",
  },
  oPartialsInRouter: {
    type: "boolean",
    help: "MoE layers whose router takes the input norm in one pass (moe_router_norm) add the " +
      "o projection's split-K partial sums to the residual there, one splitk_reduce dispatch " +
      "a layer fewer (default true; --o-partials-in-router=false: the reduce)",
  },
  qkInDecodeAttention: {
    type: "boolean",
    help: "decode steps whose attention form has a twin that takes qk_norm_rope_cache's work " +
      "(the tiled forms, f16-tcdw2 and f16-tcdw2h) norm and rotate q and write the new key's " +
      "K and V there, one dispatch a layer fewer (where qkv leaves split-K partial sums, only " +
      "in steps of splits of 256 keys or more; default true; --qk-in-decode-attention=false: " +
      "apart)",
  },
  combineNormF16: {
    type: "boolean",
    help: "steps whose qkv projection casts its input to f16 for the tensor cores take that " +
      "copy from the previous MoE layer's moe_combine_norm, one cast_f16 dispatch a layer " +
      "fewer (default true; --combine-norm-f16=false: the cast)",
  },
  mergeF16: {
    type: "boolean",
    help: "steps whose o projection casts its input to f16 for the tensor cores take that " +
      "copy from the attention (decode: the split attention's merge; prefill: the staged " +
      "attention's -o16 twin), one cast_f16 dispatch a layer fewer (default true; " +
      "--merge-f16=false: the cast)",
  },
  prefillQF16: {
    type: "boolean",
    help: "prefill steps on a staged attention form with a -q16 twin (the default tcs4) take " +
      "q from qk_norm_rope_cache as f16 times the scale: the same f16 values, half of q's " +
      "bytes (default true; --prefill-q-f16=false: f32 q)",
  },
  qkNormPairs: {
    type: "string",
    values: ["1", "4", "8"],
    help: "rotation pairs an invocation of qk_norm_rope_cache takes in f16 models: 1 (f16), " +
      "or the lab forms' 4 or 8 (f16-p4, f16-p8) (default: 1)",
  },
  moeRouterNorm: {
    type: "boolean",
    help: "MoE steps that route in one pass take the layer's input RMSNorm in the router " +
      "(moe_router_norm), one dispatch a layer fewer (default true; --moe-router-norm=false: " +
      "apart)",
  },
  moeTensorCorePrefill: {
    type: "string",
    values: MOE_TENSOR_CORE_PREFILL_FORMS,
    help: "the MoE expert GEMMs' prefill-sized form on the tensor cores: tc (operands straight " +
      "from memory) or tcp1, tcp2, tcp4 (both staged through workgroup memory by 1, 2 or 4 " +
      "subgroups), tcp4x2 (tcp4 over 128-row work items, 8 subgroups), tcp4x2p2 (tcp4x2 " +
      "holding two steps' words in registers: a lab form) (default: tcp4x2)",
  },
  moeDownRowsF16: {
    type: "boolean",
    help: "prefill steps on the MoE prefill form write the experts' down rows as f16 and " +
      "combine them from f16: half of those rows' bytes (1 GB of f32 a layer at 16384 " +
      "tokens), for two barriers a tile in the down GEMM and one f16 rounding of each row " +
      "(default true; --moe-down-rows-f16=false: f32 rows)",
  },
  moeExpertTiles: {
    type: "boolean",
    help: "store the MoE expert weights in tiles of 16 rows x 64 columns and run the expert " +
      "GEMMs' tiled twins (f16, hidden and expert width multiples of 64; default: on where " +
      "those hold on a GPU with subgroups; --moe-expert-tiles=false: row by row)",
  },
  weightPlacement: {
    type: "string",
    values: PLACEMENTS,
    help: "how the weights take GPU memory: each (a buffer a weight) or arena (every weight a " +
      "range of as few buffers of at most 16 GiB as the adapter allows, ranges of 2 MiB and more " +
      "on 2 MiB) (default: arena)",
  },
  kvPlacement: {
    type: "string",
    values: PLACEMENTS,
    help: "how the KV cache takes GPU memory: each (a buffer a layer's K and V) or arena (ranges " +
      "of as few buffers of at most 16 GiB as the adapter allows) (default: each)",
  },
  prefillAttention: {
    type: "string",
    values: ["tc", "tc2", "tcs", "tcs2", "tcs4", "fma"],
    help: "attention of prefill steps: tc (tensor cores), tc2 (two key tiles a step), tcs (K " +
      "and V staged through workgroup memory), tcs2 / tcs4 (as tcs, 2 or 4 subgroups sharing " +
      "each step's K and V) or fma (default: tcs4 where it runs, else tcs2, else tcs, else fma)",
  },
  tensorCoreF32InputRows: {
    type: "number",
    integer: true,
    min: 0,
    help: "tensor-core linears of at most this many rows read the f32 activations and round " +
      "them to f16 as they stage them (the staged forms' -a32 twins), with no cast_f16 " +
      "dispatch before each (default 16; 0 never)",
  },
  tensorCoreSplitTarget: {
    type: "number",
    integer: true,
    min: 0,
    help: "split-K of the tensor-core GEMM up to 128 rows: about this many workgroups a " +
      "layer (default 2048; 0 never, also past 128 rows, where only layers of few tiles such " +
      "as the router split, toward 128 workgroups)",
  },
} as const satisfies Record<string, OptionSpec>;

/** GpuModelOptions' tensor-core fields from TENSOR_CORE_OPTIONS' values. */
export function tensorCoreOptions(
  o: {
    readonly tensorCoreRows?: number;
    readonly tensorCoreTile?: string;
    readonly tensorCoreDecodeRows?: number;
    readonly tensorCoreDecodeSubgroups?: string;
    readonly tensorCorePrefill?: string;
    readonly tensorCorePrefillWide?: string;
    readonly lmHeadForms?: string;
    readonly tensorCoreSplitMinK?: number;
    readonly tensorCoreSplitTarget?: number;
    readonly tensorCoreF32InputRows?: number;
    readonly moeTensorCoreRows?: number;
    readonly moeTcDecodeRows?: number;
    readonly moeFusedRouterTokens?: number;
    readonly moeFusedRouterMinTokens?: number;
    readonly moeRouteDispatchTokens?: number;
    readonly moeRoutedGateUp?: boolean;
    readonly moeSplitRouterTokens?: number;
    readonly moeSplitRouterMinTokens?: number;
    readonly qkvNormInGemv?: boolean;
    readonly qkvScaledAfterMoe?: boolean;
    readonly moeDownCombineTokens?: number;
    readonly moeDownCombineForm?: string;
    readonly oSplitsOneRow?: number;
    readonly qkvPartialsInRope?: boolean;
    readonly oPartialsInRouter?: boolean;
    readonly qkInDecodeAttention?: boolean;
    readonly combineNormF16?: boolean;
    readonly mergeF16?: boolean;
    readonly prefillQF16?: boolean;
    readonly qkNormPairs?: string;
    readonly moeCombineNorm?: boolean;
    readonly moeRouterNorm?: boolean;
    readonly moeTensorCorePrefill?: string;
    readonly moeDownRowsF16?: boolean;
    readonly moeExpertTiles?: boolean;
    readonly prefillAttention?: string;
    readonly weightPlacement?: string;
    readonly kvPlacement?: string;
  },
): GpuModelOptions {
  return {
    weightPlacement: o.weightPlacement as Placement | undefined,
    kvPlacement: o.kvPlacement as Placement | undefined,
    prefillAttention: o.prefillAttention as PrefillAttentionForm | undefined,
    moeTensorCoreRows: o.moeTensorCoreRows,
    moeTensorCoreDecodeRows: o.moeTcDecodeRows,
    moeFusedRouterTokens: o.moeFusedRouterTokens,
    moeFusedRouterMinTokens: o.moeFusedRouterMinTokens,
    moeRouteDispatchTokens: o.moeRouteDispatchTokens,
    moeRoutedGateUp: o.moeRoutedGateUp,
    moeSplitRouterTokens: o.moeSplitRouterTokens,
    moeSplitRouterMinTokens: o.moeSplitRouterMinTokens,
    qkvNormInGemv: o.qkvNormInGemv,
    qkvScaledAfterMoe: o.qkvScaledAfterMoe,
    moeDownCombineTokens: o.moeDownCombineTokens,
    moeDownCombineForm: o.moeDownCombineForm,
    oSplitsOneRow: o.oSplitsOneRow,
    qkvPartialsInRope: o.qkvPartialsInRope,
    oPartialsInRouter: o.oPartialsInRouter,
    qkInDecodeAttention: o.qkInDecodeAttention,
    combineNormF16: o.combineNormF16,
    mergeF16: o.mergeF16,
    prefillQF16: o.prefillQF16,
    qkNormPairs: o.qkNormPairs === undefined ? undefined : Number(o.qkNormPairs) as 1 | 4 | 8,
    fuseCombineNorm: o.moeCombineNorm,
    moeRouterNorm: o.moeRouterNorm,
    moeTensorCorePrefill: o.moeTensorCorePrefill as MoeTensorCorePrefillForm | undefined,
    moeDownRowsF16: o.moeDownRowsF16,
    moeExpertTiles: o.moeExpertTiles,
    tensorCoreRows: o.tensorCoreRows,
    tensorCoreSplitTarget: o.tensorCoreSplitTarget,
    tensorCoreF32InputRows: o.tensorCoreF32InputRows,
    tensorCoreDecodeRows: o.tensorCoreDecodeRows,
    tensorCoreDecodeSubgroups: o.tensorCoreDecodeSubgroups as "one" | "rows" | undefined,
    tensorCorePrefill: o.tensorCorePrefill as TensorCorePrefillForm | undefined,
    tensorCorePrefillWide: o.tensorCorePrefillWide as TensorCorePrefillForm | undefined,
    lmHeadForms: o.lmHeadForms === undefined ? undefined : parseLmHeadForms(o.lmHeadForms),
    tensorCoreSplitMinK: o.tensorCoreSplitMinK,
    tensorCoreTile: o.tensorCoreTile === undefined
      ? undefined
      : Number(o.tensorCoreTile) as 0 | 16 | 32 | 64,
  };
}

/**
 * `--lm-head-forms`: "none" or ROWS:FORM entries, comma-separated (FORM without its f16-
 * prefix), rows ascending; a bad entry is an InputError naming it (unknown forms are named
 * when the model loads).
 */
export function parseLmHeadForms(text: string): LmHeadForm[] {
  if (text.trim() === "none") return [];
  let last = 0;
  return text.split(",").map((entry) => {
    const m = /^\s*(\d+):([\w-]+)\s*$/.exec(entry);
    const rows = m ? Number(m[1]) : NaN;
    if (!m || rows <= last) {
      throw new InputError(
        `--lm-head-forms: '${entry}' is not ROWS:FORM with ROWS a positive integer above the ` +
          `previous entry's`,
      );
    }
    last = rows;
    return { maxRows: rows, variant: `f16-${m[2]}` };
  });
}

/** The parsed values of MODEL_OPTIONS. */
export interface ModelOptionValues {
  readonly model?: string;
  readonly dtype?: string;
  readonly kvCacheGb?: number;
  readonly maxNumTokens?: number;
  readonly maxNumSeqs?: number;
  readonly maxModelLen?: number;
}

/** The model spec as GpuModel.load takes it (a folder resolved against the caller's). */
export function modelSpec(opts: ModelOptionValues): string {
  if (!opts.model) {
    throw new InputError("--model is required (a checkpoint folder or synthetic:NAME)");
  }
  if (opts.model.startsWith("synthetic:")) return opts.model;
  const dir = userPath(opts.model);
  if (!existsSync(join(dir, "config.json"))) {
    throw new InputError(`--model ${opts.model}: no config.json in ${dir}`);
  }
  return dir;
}

/** Loads the model with the options' limits; progress lines go to `log`. */
export async function loadModel(
  gpu: Gpu,
  opts: ModelOptionValues,
  log: (line: string) => void,
  extra: { profile?: boolean } = {},
): Promise<GpuModel> {
  const { spec } = checkedModel(modelSpec(opts));
  return await GpuModel.load(gpu, spec, {
    dtype: opts.dtype as "f16" | "f32" | undefined,
    kvCacheBytes: opts.kvCacheGb === undefined ? undefined : Math.floor(opts.kvCacheGb * 2 ** 30),
    maxNumTokens: opts.maxNumTokens,
    maxNumSeqs: opts.maxNumSeqs,
    maxModelLen: opts.maxModelLen,
    profile: extra.profile,
  }, log);
}

/**
 * The model's tokenizer: the folder's tokenizer.json, or Qwen3's for synthetic models and
 * folders without one (as openModelSpec); InputError naming a file that cannot be read.
 */
export function loadTokenizer(opts: ModelOptionValues): ModelTokenizer {
  const spec = modelSpec(opts);
  const own = spec.startsWith("synthetic:") ? null : join(spec, "tokenizer.json");
  try {
    return ModelTokenizer.fromFile(own && existsSync(own) ? own : qwen3TokenizerJsonPath());
  } catch (err) {
    throw new InputError((err as Error).message);
  }
}
