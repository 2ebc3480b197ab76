/**
 * The checkpoint tensors each architecture needs, by their Hugging Face names and shapes
 * (PyTorch `nn.Linear` layout: weight is [out_features, in_features]), and a check of a
 * checkpoint against that list.
 *
 * ```
 * model.embed_tokens.weight                         [vocab, hidden]
 * model.layers.N.input_layernorm.weight             [hidden]
 * model.layers.N.self_attn.{q,k,v,o}_proj.weight    q [heads*hd, hidden], k/v [kv*hd, hidden], o [hidden, heads*hd]
 * model.layers.N.self_attn.{q,k}_norm.weight        [hd]            (Qwen3 families)
 * model.layers.N.post_attention_layernorm.weight    [hidden]
 * Qwen3-MoE layer:  mlp.gate.weight [E, hidden]; mlp.experts.E.{gate,up}_proj [I, hidden], down_proj [hidden, I]
 * Mixtral layer:    block_sparse_moe.gate.weight [E, hidden]; block_sparse_moe.experts.E.{w1,w3} [I, hidden], w2 [hidden, I]
 * dense layer:      mlp.{gate,up}_proj [I, hidden], mlp.down_proj [hidden, I]
 * model.norm.weight                                 [hidden]
 * lm_head.weight                                    [vocab, hidden]  (absent when tied)
 * ```
 */
import type { Checkpoint } from "./checkpoint.ts";
import type { ModelConfig } from "./config.ts";
import { isFloatDtype } from "./tensor_convert.ts";

/** A tensor the model needs. */
export interface ExpectedTensor {
  readonly name: string;
  readonly shape: readonly number[];
}

/** Names of one layer's attention tensors. */
export interface AttentionTensorNames {
  readonly inputNorm: string;
  readonly q: string;
  readonly k: string;
  readonly v: string;
  readonly o: string;
  /** null when the architecture has no q/k norm (Mixtral). */
  readonly qNorm: string | null;
  readonly kNorm: string | null;
  readonly postAttentionNorm: string;
}

/** Names of a SwiGLU MLP's tensors: out = down(silu(gate(x)) * up(x)). */
export interface MlpTensorNames {
  readonly gate: string;
  readonly up: string;
  readonly down: string;
}

/** The embedding table's name. */
export const EMBED_TENSOR = "model.embed_tokens.weight";
/** The final norm's name. */
export const FINAL_NORM_TENSOR = "model.norm.weight";

/** The LM head's tensor: `lm_head.weight`, or the embedding table when tied. */
export function lmHeadTensorName(config: ModelConfig): string {
  return config.tieWordEmbeddings ? EMBED_TENSOR : "lm_head.weight";
}

/** Attention-side tensor names of layer `layer`. */
export function attentionTensorNames(config: ModelConfig, layer: number): AttentionTensorNames {
  const p = `model.layers.${layer}.`;
  return {
    inputNorm: `${p}input_layernorm.weight`,
    q: `${p}self_attn.q_proj.weight`,
    k: `${p}self_attn.k_proj.weight`,
    v: `${p}self_attn.v_proj.weight`,
    o: `${p}self_attn.o_proj.weight`,
    qNorm: config.qkNorm ? `${p}self_attn.q_norm.weight` : null,
    kNorm: config.qkNorm ? `${p}self_attn.k_norm.weight` : null,
    postAttentionNorm: `${p}post_attention_layernorm.weight`,
  };
}

/** The router (gate) tensor of MoE layer `layer`: [numExperts, hidden]. */
export function routerTensorName(config: ModelConfig, layer: number): string {
  return config.architecture === "MixtralForCausalLM"
    ? `model.layers.${layer}.block_sparse_moe.gate.weight`
    : `model.layers.${layer}.mlp.gate.weight`;
}

/** Expert `expert` of MoE layer `layer` (Mixtral's w1/w3/w2 are gate/up/down). */
export function expertTensorNames(
  config: ModelConfig,
  layer: number,
  expert: number,
): MlpTensorNames {
  if (config.architecture === "MixtralForCausalLM") {
    const p = `model.layers.${layer}.block_sparse_moe.experts.${expert}.`;
    return { gate: `${p}w1.weight`, up: `${p}w3.weight`, down: `${p}w2.weight` };
  }
  const p = `model.layers.${layer}.mlp.experts.${expert}.`;
  return { gate: `${p}gate_proj.weight`, up: `${p}up_proj.weight`, down: `${p}down_proj.weight` };
}

/** The dense MLP of layer `layer`. */
export function denseMlpTensorNames(layer: number): MlpTensorNames {
  const p = `model.layers.${layer}.mlp.`;
  return { gate: `${p}gate_proj.weight`, up: `${p}up_proj.weight`, down: `${p}down_proj.weight` };
}

/** Every tensor the model reads, in a fixed order (embedding, layers, final norm, head). */
export function expectedTensors(config: ModelConfig): ExpectedTensor[] {
  const { hiddenSize: h, headDim: hd, numHeads, numKvHeads, vocabSize } = config;
  const out: ExpectedTensor[] = [{ name: EMBED_TENSOR, shape: [vocabSize, h] }];
  for (let l = 0; l < config.numLayers; l++) {
    const a = attentionTensorNames(config, l);
    out.push({ name: a.inputNorm, shape: [h] });
    out.push({ name: a.q, shape: [numHeads * hd, h] });
    out.push({ name: a.k, shape: [numKvHeads * hd, h] });
    out.push({ name: a.v, shape: [numKvHeads * hd, h] });
    out.push({ name: a.o, shape: [h, numHeads * hd] });
    if (a.qNorm && a.kNorm) {
      out.push({ name: a.qNorm, shape: [hd] });
      out.push({ name: a.kNorm, shape: [hd] });
    }
    out.push({ name: a.postAttentionNorm, shape: [h] });
    if (config.layerKinds[l] === "moe") {
      const i = config.moeIntermediateSize;
      out.push({ name: routerTensorName(config, l), shape: [config.numExperts, h] });
      for (let e = 0; e < config.numExperts; e++) {
        const m = expertTensorNames(config, l, e);
        out.push({ name: m.gate, shape: [i, h] }, { name: m.up, shape: [i, h] });
        out.push({ name: m.down, shape: [h, i] });
      }
    } else {
      const i = config.intermediateSize;
      const m = denseMlpTensorNames(l);
      out.push({ name: m.gate, shape: [i, h] }, { name: m.up, shape: [i, h] });
      out.push({ name: m.down, shape: [h, i] });
    }
  }
  out.push({ name: FINAL_NORM_TENSOR, shape: [h] });
  if (!config.tieWordEmbeddings) out.push({ name: "lm_head.weight", shape: [vocabSize, h] });
  return out;
}

/**
 * Checks that a checkpoint holds every expected tensor with the expected shape and a float
 * dtype (F32/F16/BF16). Throws an error naming the first missing or mismatched tensor;
 * returns the names of extra tensors the model ignores.
 */
export function checkCheckpointTensors(config: ModelConfig, ckpt: Checkpoint): string[] {
  const expected = expectedTensors(config);
  for (const t of expected) {
    if (!ckpt.has(t.name)) {
      throw new Error(`${ckpt.dir}: missing tensor "${t.name}" (${config.architecture})`);
    }
    const info = ckpt.info(t.name);
    if (
      info.shape.length !== t.shape.length || info.shape.some((d, i) => d !== t.shape[i])
    ) {
      throw new Error(
        `${
          ckpt.pathOf(t.name)
        }: tensor "${t.name}" has shape [${info.shape}], expected [${t.shape}]`,
      );
    }
    if (!isFloatDtype(info.dtype)) {
      throw new Error(
        `${ckpt.pathOf(t.name)}: tensor "${t.name}" has dtype ${info.dtype}, not F32/F16/BF16`,
      );
    }
  }
  const names = new Set(expected.map((t) => t.name));
  return ckpt.names().filter((n) => !names.has(n));
}
