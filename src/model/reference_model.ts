/**
 * The full-model CPU reference forward for Qwen3-MoE, Mixtral and dense Qwen3: plain
 * TypeScript, weights converted to f32, f64 accumulation inside each op. It is the ground
 * truth the GPU model's logits are checked against. Tokens run one at a time against a KV
 * cache, so a prefill is causal by construction and prefill-then-decode is the same
 * computation as one long prefill.
 *
 * One decoder layer, for a token at position p:
 * ```
 * h = rmsnorm(x); q,k,v = Wq h, Wk h, Wv h; q,k = per-head rmsnorm (Qwen3); rope(q, k, p)
 * attn = softmax(q.K^T / sqrt(head_dim)) V over positions 0..p (GQA: kv head = q head / group)
 * x += Wo attn; h = rmsnorm(x)
 * x += dense: down(silu(gate h) * up h)
 *      moe:   sum over top-k experts e of w_e * expert_e(h), w = softmax(router h) top-k
 *             (ties -> lower expert index), renormalized when normTopkProb
 * logits = lm_head(rmsnorm(x))
 * ```
 *
 * ```ts
 * const model = ReferenceModel.load("fixtures/out/tiny-qwen3-moe");
 * const logits = referenceLogits(model, [9707, 1879]); // Float32Array [2 * vocab]
 * ```
 */
import { roundToF16InPlace } from "../util/f16.ts";
import { Checkpoint } from "./checkpoint.ts";
import { loadModelConfig, type ModelConfig } from "./config.ts";
import {
  attentionTensorNames,
  checkCheckpointTensors,
  denseMlpTensorNames,
  EMBED_TENSOR,
  expertTensorNames,
  FINAL_NORM_TENSOR,
  lmHeadTensorName,
  routerTensorName,
} from "./model_tensors.ts";
import { applyRope, matVec, rmsNorm, ropeInvFreq, softmax, swiglu, topK } from "./reference_ops.ts";

/** Options for loading the reference. */
export interface ReferenceLoadOptions {
  /**
   * Round every weight to f16 after loading (to compare against a GPU model that stores
   * f16 weights). Default false: weights keep their checkpoint values exactly.
   */
  readonly roundWeightsToF16?: boolean;
}

/** The experts one token was routed to in one MoE layer. */
export interface RouterChoice {
  readonly layer: number;
  /** Index of the token within the forward call. */
  readonly token: number;
  /** Absolute position of the token. */
  readonly position: number;
  /** Chosen experts, highest router probability first. */
  readonly experts: readonly number[];
  /** Their combine weights (renormalized when normTopkProb). */
  readonly weights: readonly number[];
}

/** Result of one reference forward call. */
export interface ReferenceForwardResult {
  /** [tokens, vocab] f32 logits, row-major. */
  readonly logits: Float32Array;
  /** Every MoE layer's choice for every token, layer-major then token order. */
  readonly routes: readonly RouterChoice[];
}

/** Per-layer K and V of the tokens seen so far: [position][kvHeads * headDim]. */
export class ReferenceKvCache {
  /** keys[layer][position] */
  readonly keys: Float32Array[][];
  /** values[layer][position] */
  readonly values: Float32Array[][];

  /** An empty cache for a model of `numLayers` layers. */
  constructor(numLayers: number) {
    this.keys = Array.from({ length: numLayers }, () => []);
    this.values = Array.from({ length: numLayers }, () => []);
  }

  /** Number of positions cached (the next token's position). */
  get length(): number {
    return this.keys.length === 0 ? 0 : this.keys[0].length;
  }
}

interface LayerWeights {
  inputNorm: Float32Array;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  o: Float32Array;
  qNorm: Float32Array | null;
  kNorm: Float32Array | null;
  postNorm: Float32Array;
  /** [numExperts, hidden] for MoE layers. */
  router: Float32Array | null;
  /** One entry per expert for MoE layers, one entry for a dense MLP. */
  mlps: { gate: Float32Array; up: Float32Array; down: Float32Array }[];
}

export class ReferenceModel {
  /** The model's configuration. */
  readonly config: ModelConfig;
  private readonly embed: Float32Array;
  private readonly layers: LayerWeights[];
  private readonly finalNorm: Float32Array;
  private readonly lmHead: Float32Array;
  private readonly invFreq: Float32Array;

  private constructor(
    config: ModelConfig,
    embed: Float32Array,
    layers: LayerWeights[],
    finalNorm: Float32Array,
    lmHead: Float32Array,
  ) {
    this.config = config;
    this.embed = embed;
    this.layers = layers;
    this.finalNorm = finalNorm;
    this.lmHead = lmHead;
    this.invFreq = ropeInvFreq(config.ropeTheta, config.headDim);
  }

  /** Loads config.json and the checkpoint of a model directory (all weights as f32). */
  static load(dir: string, options: ReferenceLoadOptions = {}): ReferenceModel {
    const config = loadModelConfig(dir);
    const ckpt = Checkpoint.open(dir);
    try {
      return ReferenceModel.fromCheckpoint(config, ckpt, options);
    } finally {
      ckpt.close();
    }
  }

  /**
   * Reads every weight the config names from an open checkpoint (which stays open).
   * Throws an error naming the first missing or mis-shaped tensor.
   */
  static fromCheckpoint(
    config: ModelConfig,
    ckpt: Checkpoint,
    options: ReferenceLoadOptions = {},
  ): ReferenceModel {
    checkCheckpointTensors(config, ckpt);
    const read = (name: string) => {
      const w = ckpt.readF32(name);
      return options.roundWeightsToF16 ? roundToF16InPlace(w) : w;
    };
    const layers: LayerWeights[] = [];
    for (let l = 0; l < config.numLayers; l++) {
      const a = attentionTensorNames(config, l);
      const moe = config.layerKinds[l] === "moe";
      const mlpNames = moe
        ? Array.from({ length: config.numExperts }, (_, e) => expertTensorNames(config, l, e))
        : [denseMlpTensorNames(l)];
      layers.push({
        inputNorm: read(a.inputNorm),
        q: read(a.q),
        k: read(a.k),
        v: read(a.v),
        o: read(a.o),
        qNorm: a.qNorm ? read(a.qNorm) : null,
        kNorm: a.kNorm ? read(a.kNorm) : null,
        postNorm: read(a.postAttentionNorm),
        router: moe ? read(routerTensorName(config, l)) : null,
        mlps: mlpNames.map((m) => ({ gate: read(m.gate), up: read(m.up), down: read(m.down) })),
      });
    }
    const embed = read(EMBED_TENSOR);
    const lmHead = config.tieWordEmbeddings ? embed : read(lmHeadTensorName(config));
    return new ReferenceModel(config, embed, layers, read(FINAL_NORM_TENSOR), lmHead);
  }

  /** An empty KV cache for this model. */
  newCache(): ReferenceKvCache {
    return new ReferenceKvCache(this.config.numLayers);
  }

  /**
   * Runs `tokenIds` at positions `cache.length, cache.length + 1, ...`, appending their K/V
   * to `cache`, and returns the logits of every token and the router choices.
   */
  forward(cache: ReferenceKvCache, tokenIds: ArrayLike<number>): ReferenceForwardResult {
    const { vocabSize, hiddenSize } = this.config;
    if (cache.keys.length !== this.config.numLayers) {
      throw new Error(
        `reference forward: cache has ${cache.keys.length} layers, model has ${this.config.numLayers}`,
      );
    }
    const logits = new Float32Array(tokenIds.length * vocabSize);
    const routes: RouterChoice[][] = this.layers.map(() => []);
    for (let t = 0; t < tokenIds.length; t++) {
      const id = tokenIds[t];
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
        throw new Error(
          `reference forward: token id ${id} at index ${t} outside [0, ${vocabSize})`,
        );
      }
      const position = cache.length;
      let x: Float32Array = this.embed.slice(id * hiddenSize, (id + 1) * hiddenSize);
      for (let l = 0; l < this.layers.length; l++) {
        x = this.layer(
          l,
          x,
          position,
          cache,
          (experts, weights) => routes[l].push({ layer: l, token: t, position, experts, weights }),
        );
      }
      const h = rmsNorm(x, this.finalNorm, this.config.rmsNormEps);
      logits.set(matVec(this.lmHead, h, vocabSize, hiddenSize), t * vocabSize);
    }
    return { logits, routes: routes.flat() };
  }

  private layer(
    l: number,
    x: Float32Array,
    position: number,
    cache: ReferenceKvCache,
    onRoute: (experts: number[], weights: number[]) => void,
  ): Float32Array {
    const c = this.config;
    const w = this.layers[l];
    const hd = c.headDim;
    const h = rmsNorm(x, w.inputNorm, c.rmsNormEps);
    let q = matVec(w.q, h, c.numHeads * hd, c.hiddenSize);
    let k = matVec(w.k, h, c.numKvHeads * hd, c.hiddenSize);
    const v = matVec(w.v, h, c.numKvHeads * hd, c.hiddenSize);
    if (w.qNorm && w.kNorm) {
      q = rmsNorm(q, w.qNorm, c.rmsNormEps);
      k = rmsNorm(k, w.kNorm, c.rmsNormEps);
    }
    applyRope(q, hd, position, this.invFreq);
    applyRope(k, hd, position, this.invFreq);
    const keys = cache.keys[l], values = cache.values[l];
    if (keys.length !== position) {
      throw new Error(
        `reference forward: layer ${l} cache holds ${keys.length} positions, expected ${position}`,
      );
    }
    keys.push(k);
    values.push(v);

    const attn = new Float32Array(c.numHeads * hd);
    const group = c.numHeads / c.numKvHeads;
    const scale = 1 / Math.sqrt(hd);
    const scores = new Float64Array(keys.length);
    for (let head = 0; head < c.numHeads; head++) {
      const qo = head * hd, kvo = Math.floor(head / group) * hd;
      for (let j = 0; j < keys.length; j++) {
        let dot = 0;
        for (let i = 0; i < hd; i++) dot += q[qo + i] * keys[j][kvo + i];
        scores[j] = dot * scale;
      }
      const p = softmax(scores);
      for (let i = 0; i < hd; i++) {
        let acc = 0;
        for (let j = 0; j < keys.length; j++) acc += p[j] * values[j][kvo + i];
        attn[qo + i] = acc;
      }
    }
    const o = matVec(w.o, attn, c.hiddenSize, c.numHeads * hd);
    const x1 = new Float32Array(c.hiddenSize);
    for (let i = 0; i < x1.length; i++) x1[i] = x[i] + o[i];

    const h2 = rmsNorm(x1, w.postNorm, c.rmsNormEps);
    const ffn = new Float64Array(c.hiddenSize);
    if (w.router) {
      const probs = softmax(matVec(w.router, h2, c.numExperts, c.hiddenSize));
      const experts = topK(probs, c.numExpertsPerTok);
      let weights = experts.map((e) => probs[e]);
      if (c.normTopkProb) {
        const sum = weights.reduce((a, b) => a + b, 0);
        weights = weights.map((p) => p / sum);
      }
      weights = weights.map(Math.fround);
      onRoute(experts, weights);
      for (let j = 0; j < experts.length; j++) {
        const m = w.mlps[experts[j]];
        const out = swiglu(h2, m.gate, m.up, m.down, c.hiddenSize, c.moeIntermediateSize);
        for (let i = 0; i < out.length; i++) ffn[i] += weights[j] * out[i];
      }
    } else {
      const m = w.mlps[0];
      const out = swiglu(h2, m.gate, m.up, m.down, c.hiddenSize, c.intermediateSize);
      ffn.set(out);
    }
    const x2 = new Float32Array(c.hiddenSize);
    for (let i = 0; i < x2.length; i++) x2[i] = x1[i] + Math.fround(ffn[i]);
    return x2;
  }
}

/** Logits [tokens, vocab] of one fresh prefill of `tokenIds` (positions 0..n-1). */
export function referenceLogits(model: ReferenceModel, tokenIds: ArrayLike<number>): Float32Array {
  return model.forward(model.newCache(), tokenIds).logits;
}
