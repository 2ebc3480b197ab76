/**
 * What one forward step must move and compute, per dispatch label of GpuModel's step
 * (the labels its profile mode reports) and in total: the numerator of every roofline
 * figure. Bytes count each weight, KV entry and activation read once and each output
 * written once; experts count only those the step's tokens route to.
 *
 * ```ts
 * const cost = stepCost(config, "f16", { seqs: Array(8).fill({ queryLen: 1, contextLen: 1024 }), sampledRows: 8 });
 * cost.totalBytes / 4.5e12 * 1e3; // roofline ms at 4.5 TB/s
 * cost.byLabel.get("linear qkv"); // { calls: 48, bytes, flops }
 * ```
 */
import type { ModelConfig } from "./config.ts";
import { MOE_STAGE_LABEL, type MoeStage, moeStageCosts } from "../../kernels/moe_cost.ts";

/** The shape of a step: per sequence its new tokens and its context after the step. */
export interface StepShape {
  readonly seqs: readonly { readonly queryLen: number; readonly contextLen: number }[];
  /** Rows whose logits are computed and sampled (one per sequence in serving). */
  readonly sampledRows: number;
  /**
   * Experts that receive at least one token, per MoE layer (average). Default: the
   * expectation under uniform routing, E * (1 - (1 - k/E)^tokens).
   */
  readonly expertsTouched?: number;
}

/** Cost of the dispatches that share a label. */
export interface DispatchCost {
  readonly calls: number;
  readonly bytes: number;
  readonly flops: number;
}

export interface StepCost {
  readonly byLabel: ReadonlyMap<string, DispatchCost>;
  readonly totalBytes: number;
  readonly totalFlops: number;
  /** The roofline's parts (GPU.md's definition: weights touched + KV read + LM head). */
  readonly parts: {
    readonly attentionWeights: number;
    readonly expertWeights: number;
    readonly denseMlpWeights: number;
    readonly kvRead: number;
    readonly lmHead: number;
    readonly activations: number;
  };
}

/** Expected experts touched by `tokens` tokens each routed to k of E experts uniformly. */
export function expectedExpertsTouched(experts: number, topK: number, tokens: number): number {
  if (experts <= 0) return 0;
  return experts * (1 - Math.pow(1 - topK / experts, tokens));
}

/**
 * Which fused forms a step takes (GpuModel.stepCost passes them), where they move a cost from
 * one label to another: `routerInOnePass`, the router's GEMV into `moe router`
 * (moe_router_fused); `routerNorm`, the MoE layers' input RMSNorm into `moe router` too
 * (moe_router_norm); `routeDispatch`, the MoE dispatch into `moe router` (moe_route_dispatch);
 * `combineNorm`, the input RMSNorm of each layer after a MoE layer into `moe combine`
 * (moe_combine_norm); `qkvNorm`, every layer's input RMSNorm into `linear qkv` (gemv_norm; the
 * combine then norms nothing); `downCombine`, the MoE combine into `moe down`
 * (moe_gemm_down_combine, which writes and reads back no y rows). Default: none.
 */
export interface StepForms {
  readonly routerInOnePass: boolean;
  readonly routerNorm?: boolean;
  readonly routeDispatch?: boolean;
  readonly combineNorm: boolean;
  readonly qkvNorm?: boolean;
  readonly downCombine?: boolean;
}

/** Per-label and total bytes / FLOPs of one step. */
export function stepCost(
  config: ModelConfig,
  dtype: "f16" | "f32",
  shape: StepShape,
  forms: StepForms = { routerInOnePass: false, combineNorm: false },
): StepCost {
  const es = dtype === "f16" ? 2 : 4;
  const H = config.hiddenSize, hd = config.headDim;
  const nq = config.numHeads, nkv = config.numKvHeads;
  const T = shape.seqs.reduce((s, q) => s + q.queryLen, 0);
  const R = shape.sampledRows;
  const L = config.numLayers;
  const moeLayers = config.layerKinds.filter((k) => k === "moe").length;
  const denseLayers = L - moeLayers;
  const E = config.numExperts, k = config.numExpertsPerTok, I = config.moeIntermediateSize;
  const Id = config.intermediateSize;
  const qkvRows = (nq + 2 * nkv) * hd;
  const decode = shape.seqs.every((s) => s.queryLen === 1);
  const U = shape.expertsTouched ?? expectedExpertsTouched(E, k, T);

  const costs = new Map<string, { calls: number; bytes: number; flops: number }>();
  const add = (label: string, calls: number, bytes: number, flops: number) => {
    const c = costs.get(label) ?? { calls: 0, bytes: 0, flops: 0 };
    c.calls += calls;
    c.bytes += bytes;
    c.flops += flops;
    costs.set(label, c);
  };
  const linear = (
    label: string,
    layers: number,
    rows: number,
    n: number,
    kk: number,
    acc: boolean,
  ) =>
    add(
      `linear ${label}`,
      layers,
      layers * (n * kk * es + rows * kk * 4 + rows * n * 4 * (acc ? 2 : 1)),
      layers * 2 * rows * n * kk,
    );

  // KV each layer's attention reads: every context token's K and V once per sequence.
  let kvTokens = 0, attnFlops = 0;
  for (const s of shape.seqs) {
    kvTokens += s.contextLen;
    // causal: query i sees contextLen - queryLen + i + 1 keys
    const keys = s.queryLen * (s.contextLen - s.queryLen) + (s.queryLen * (s.queryLen + 1)) / 2;
    attnFlops += 4 * keys * nq * hd;
  }
  const kvRead = L * kvTokens * nkv * hd * 2 * es;

  add("embedding", 1, T * H * (es + 4) + T * 8, 0);
  // the input norms of the layers after a MoE layer, where the combine writes them
  const kinds = config.layerKinds;
  const normsInCombine = forms.combineNorm && !forms.qkvNorm
    ? kinds.filter((kind, l) => kind === "moe" && l + 1 < L).length
    : 0;
  // the MoE layers' input norms (post-attention), where their one-pass router takes them
  const normsInRouter = forms.routerInOnePass && forms.routerNorm ? moeLayers : 0;
  // the layers' input norms, where the qkv GEMV takes them (it reads the residual row anyway)
  const normsInQkv = forms.qkvNorm ? L : 0;
  const norms = 2 * L - normsInCombine - normsInRouter - normsInQkv;
  const normBytes = T * H * 8 + H * es, normFlops = T * H * 4;
  add("rmsnorm", norms, norms * normBytes, norms * normFlops);
  linear("qkv", L, T, qkvRows, H, false);
  add("linear qkv", 0, normsInQkv * H * es, normsInQkv * normFlops);
  add(
    "qk_norm_rope_cache",
    L,
    L * (T * qkvRows * 4 + T * nq * hd * 4 + T * 2 * nkv * hd * es),
    L * T * (nq + nkv) * hd * 8,
  );
  const qBytes = T * nq * hd * 4;
  if (decode) {
    add("paged_attention_decode", L, kvRead + L * 2 * qBytes, L * attnFlops);
  } else {
    add("paged_attention", L, kvRead + L * 2 * qBytes, L * attnFlops);
  }
  linear("o", L, T, H, nq * hd, true);
  if (moeLayers) {
    const routerBytes = E * H * es + T * H * 4 + T * E * 4, routerFlops = 2 * T * E * H;
    if (forms.routerInOnePass) {
      add(MOE_STAGE_LABEL.router, 0, moeLayers * routerBytes, moeLayers * routerFlops);
      // moe_router_norm reads each residual row once: the norm's bytes less the router's read
      // of its input rows
      add(
        MOE_STAGE_LABEL.router,
        0,
        normsInRouter * (normBytes - T * H * 4),
        normsInRouter * normFlops,
      );
    } else {
      linear("router", moeLayers, T, E, H, false);
    }
    // the MoE block's stages, for the U experts that get rows
    const stages = moeStageCosts(
      { hidden: H, inter: I, experts: E, topK: k, weightBytes: es },
      T,
      U,
    );
    for (const [stage, c] of Object.entries(stages) as [MoeStage, typeof stages.router][]) {
      if (stage === "dispatch" && forms.routeDispatch) {
        add(MOE_STAGE_LABEL.router, 0, moeLayers * c.bytes, moeLayers * c.flops);
      } else if (stage === "combine" && forms.downCombine) {
        // the down GEMM adds its rows itself: no y rows written and read back
        const yBytes = 2 * T * k * H * 4;
        add(MOE_STAGE_LABEL.down, 0, moeLayers * (c.bytes - yBytes), moeLayers * c.flops);
      } else {
        add(MOE_STAGE_LABEL[stage], moeLayers, moeLayers * c.bytes, moeLayers * c.flops);
      }
    }
    add(MOE_STAGE_LABEL.combine, 0, normsInCombine * normBytes, normsInCombine * normFlops);
  }
  if (denseLayers) {
    linear("gateUp", denseLayers, T, 2 * Id, H, false);
    add("silu_mul", denseLayers, denseLayers * T * Id * 12, denseLayers * T * Id * 5);
    linear("down", denseLayers, T, H, Id, true);
  }
  if (R > 0) {
    // a step sampling every token (decode) norms the residual rows in place: no gather
    if (R !== T) add("gather_rows", 1, R * H * 8, 0);
    add("rmsnorm", 1, R * H * 8 + H * es, R * H * 4);
    linear("lmHead", 1, R, config.vocabSize, H, false);
    add("sample", 1, R * config.vocabSize * 4 + R * 20, R * config.vocabSize * 2);
  }

  let totalBytes = 0, totalFlops = 0;
  for (const c of costs.values()) {
    totalBytes += c.bytes;
    totalFlops += c.flops;
  }
  const attentionWeights = L * (qkvRows * H + H * nq * hd) * es;
  const expertWeights = moeLayers * (U * 3 * I * H + E * H) * es;
  const denseMlpWeights = denseLayers * 3 * Id * H * es;
  const lmHead = R > 0 ? config.vocabSize * H * es : 0;
  return {
    byLabel: costs,
    totalBytes,
    totalFlops,
    parts: {
      attentionWeights,
      expertWeights,
      denseMlpWeights,
      kvRead,
      lmHead,
      activations: totalBytes - attentionWeights - expertWeights - denseMlpWeights - kvRead -
        lmHead,
    },
  };
}

/** The roofline bytes of GPU.md: weights touched + KV read + LM head (no activations). */
export function rooflineBytes(cost: StepCost): number {
  const p = cost.parts;
  return p.attentionWeights + p.expertWeights + p.denseMlpWeights + p.kvRead + p.lmHead;
}
