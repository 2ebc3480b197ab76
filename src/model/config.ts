/**
 * The model configuration: Hugging Face `config.json` (+ `generation_config.json`) for
 * Qwen3-MoE, Mixtral and dense Qwen3, as written by transformers 4 or 5, normalized into
 * one frozen `ModelConfig`; and the production-shaped synthetic models.
 *
 * Fields that set a shape (sizes, heads, experts, vocab, eps, rope theta, max positions)
 * must be present; fields with a transformers class default that every one of these
 * architectures shares take that default when absent (`tie_word_embeddings` false,
 * `mlp_only_layers` [], `decoder_sparse_step` 1, `norm_topk_prob` false, `hidden_act`
 * "silu", `attention_bias` false, dtype float32). A Qwen3-MoE config with `num_experts` 0
 * has only dense layers, as in transformers.
 *
 * ```ts
 * const config = loadModelConfig("fixtures/out/tiny-qwen3-moe");
 * config.layerKinds; // ["moe", "dense", "moe"]
 * const big = syntheticConfig("synthetic:qwen3-30b-a3b");
 * ```
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** The architectures webfpm runs (the `architectures[0]` of config.json). */
export const SUPPORTED_ARCHITECTURES = [
  "Qwen3MoeForCausalLM",
  "MixtralForCausalLM",
  "Qwen3ForCausalLM",
] as const;

/** One of SUPPORTED_ARCHITECTURES. */
export type Architecture = (typeof SUPPORTED_ARCHITECTURES)[number];

/** What a decoder layer's feed-forward block is. */
export type LayerKind = "moe" | "dense";

/** The checkpoint's declared weight dtype. */
export type WeightDtype = "f32" | "f16" | "bf16";

/** A validated, normalized, frozen model configuration. */
export interface ModelConfig {
  /** Where it came from: the checkpoint directory or the `synthetic:` name. */
  readonly name: string;
  readonly architecture: Architecture;
  /** True for the production-shaped models without files. */
  readonly synthetic: boolean;
  readonly hiddenSize: number;
  readonly numLayers: number;
  /** Query heads. */
  readonly numHeads: number;
  /** Key/value heads (GQA: numHeads is a multiple of it). */
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Width of a dense MLP (Mixtral: the expert width; it has no dense layers). */
  readonly intermediateSize: number;
  /** Width of one expert (0 for a dense model). */
  readonly moeIntermediateSize: number;
  /** Experts per MoE layer (0 for a dense model). */
  readonly numExperts: number;
  /** Experts each token is routed to (0 for a dense model). */
  readonly numExpertsPerTok: number;
  /** Renormalize the top-k router weights to sum to 1 (always true for Mixtral). */
  readonly normTopkProb: boolean;
  /** Per-head RMSNorm of q and k before RoPE (Qwen3 families). */
  readonly qkNorm: boolean;
  readonly rmsNormEps: number;
  readonly ropeTheta: number;
  readonly vocabSize: number;
  readonly maxPositionEmbeddings: number;
  /** The LM head reuses `model.embed_tokens.weight`. */
  readonly tieWordEmbeddings: boolean;
  readonly bosTokenId: number | null;
  /** End-of-sequence ids: config.json's, then generation_config.json's, deduplicated. */
  readonly eosTokenIds: readonly number[];
  readonly dtype: WeightDtype;
  /** Per decoder layer. */
  readonly layerKinds: readonly LayerKind[];
}

/** True when at least one layer is a mixture of experts. */
export function isMoeModel(config: ModelConfig): boolean {
  return config.layerKinds.includes("moe");
}

/**
 * Normalizes a parsed `config.json` (and optional parsed `generation_config.json`). `name`
 * labels errors. Throws an error naming the unsupported architecture, rope type or the
 * missing/invalid field.
 */
export function parseModelConfig(
  raw: unknown,
  options: { name?: string; generationConfig?: unknown } = {},
): ModelConfig {
  const name = options.name ?? "config.json";
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new Error(`${name}: config is not a JSON object`);
  }
  const c = raw as Record<string, unknown>;
  const f = new Fields(c, name);

  const archs = c.architectures;
  if (!Array.isArray(archs) || typeof archs[0] !== "string") {
    throw new Error(`${name}: missing field "architectures"`);
  }
  const architecture = archs[0];
  if (!(SUPPORTED_ARCHITECTURES as readonly string[]).includes(architecture)) {
    throw new Error(
      `${name}: unsupported architecture "${architecture}" (supported: ${
        SUPPORTED_ARCHITECTURES.join(", ")
      })`,
    );
  }
  const arch = architecture as Architecture;

  const hiddenAct = f.optionalString("hidden_act", "silu");
  if (hiddenAct !== "silu") throw new Error(`${name}: unsupported hidden_act "${hiddenAct}"`);
  if (f.optionalBoolean("attention_bias", false)) {
    throw new Error(`${name}: unsupported attention_bias true (q/k/v/o biases)`);
  }

  const hiddenSize = f.positiveInt("hidden_size");
  const numLayers = f.positiveInt("num_hidden_layers");
  const numHeads = f.positiveInt("num_attention_heads");
  const numKvHeads = f.positiveInt("num_key_value_heads");
  if (numHeads % numKvHeads !== 0) {
    throw new Error(
      `${name}: num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`,
    );
  }
  let headDim: number;
  if (c.head_dim === undefined || c.head_dim === null) {
    if (hiddenSize % numHeads !== 0) {
      throw new Error(
        `${name}: missing field "head_dim" and hidden_size % num_attention_heads != 0`,
      );
    }
    headDim = hiddenSize / numHeads;
  } else {
    headDim = f.positiveInt("head_dim");
  }
  if (headDim % 2 !== 0) throw new Error(`${name}: head_dim ${headDim} must be even for RoPE`);

  const ropeTheta = parseRope(c, name);
  const rmsNormEps = f.positiveNumber("rms_norm_eps");
  const vocabSize = f.positiveInt("vocab_size");
  const maxPositionEmbeddings = f.positiveInt("max_position_embeddings");
  const intermediateSize = f.positiveInt("intermediate_size");
  const tieWordEmbeddings = f.optionalBoolean("tie_word_embeddings", false);
  const dtype = parseDtype(c, name);

  let moeIntermediateSize = 0, numExperts = 0, numExpertsPerTok = 0, normTopkProb = false;
  let layerKinds: LayerKind[];
  if (arch === "Qwen3ForCausalLM") {
    if (c.use_sliding_window === true) {
      throw new Error(`${name}: unsupported use_sliding_window true`);
    }
    layerKinds = new Array<LayerKind>(numLayers).fill("dense");
  } else if (arch === "Qwen3MoeForCausalLM") {
    if (c.use_sliding_window === true) {
      throw new Error(`${name}: unsupported use_sliding_window true`);
    }
    numExperts = expertCount(c, f, name, 0);
    if (numExperts > 0) {
      numExpertsPerTok = f.positiveInt("num_experts_per_tok");
      moeIntermediateSize = f.positiveInt("moe_intermediate_size");
      normTopkProb = f.optionalBoolean("norm_topk_prob", false);
    }
    const mlpOnly = c.mlp_only_layers ?? [];
    if (!Array.isArray(mlpOnly) || !mlpOnly.every((l) => Number.isInteger(l))) {
      throw new Error(`${name}: field "mlp_only_layers" is not a list of layer indices`);
    }
    const step = c.decoder_sparse_step === undefined ? 1 : f.positiveInt("decoder_sparse_step");
    layerKinds = Array.from(
      { length: numLayers },
      (_, l) => !mlpOnly.includes(l) && numExperts > 0 && (l + 1) % step === 0 ? "moe" : "dense",
    );
  } else {
    const window = c.sliding_window;
    if (typeof window === "number" && window < maxPositionEmbeddings) {
      throw new Error(`${name}: unsupported sliding_window ${window} (< max_position_embeddings)`);
    }
    numExperts = expertCount(c, f, name, 1);
    numExpertsPerTok = f.positiveInt("num_experts_per_tok");
    moeIntermediateSize = intermediateSize;
    normTopkProb = true;
    layerKinds = new Array<LayerKind>(numLayers).fill("moe");
  }
  if (numExpertsPerTok > numExperts) {
    throw new Error(`${name}: num_experts_per_tok ${numExpertsPerTok} > experts ${numExperts}`);
  }

  const eos = [
    ...tokenIds(c.eos_token_id, `${name}: eos_token_id`),
    ...tokenIds(
      (options.generationConfig as Record<string, unknown> | undefined)?.eos_token_id,
      `${name}: generation_config eos_token_id`,
    ),
  ];
  const bos = tokenIds(c.bos_token_id, `${name}: bos_token_id`);

  return freezeConfig({
    name,
    architecture: arch,
    synthetic: false,
    hiddenSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    intermediateSize,
    moeIntermediateSize,
    numExperts,
    numExpertsPerTok,
    normTopkProb,
    qkNorm: arch !== "MixtralForCausalLM",
    rmsNormEps,
    ropeTheta,
    vocabSize,
    maxPositionEmbeddings,
    tieWordEmbeddings,
    bosTokenId: bos.length > 0 ? bos[0] : null,
    eosTokenIds: [...new Set(eos)],
    dtype,
    layerKinds,
  });
}

/**
 * Reads `config.json` (required) and `generation_config.json` (optional) from a checkpoint
 * directory and normalizes them.
 */
export function loadModelConfig(dir: string): ModelConfig {
  const configPath = join(dir, "config.json");
  if (!existsSync(configPath)) throw new Error(`${dir}: no config.json`);
  const raw = readJson(configPath);
  const genPath = join(dir, "generation_config.json");
  const generationConfig = existsSync(genPath) ? readJson(genPath) : undefined;
  return parseModelConfig(raw, { name: configPath, generationConfig });
}

/** Names accepted by `syntheticConfig`. */
export const SYNTHETIC_MODEL_NAMES = ["synthetic:qwen3-30b-a3b", "synthetic:mixtral-8x7b"] as const;

/**
 * The production shapes of Qwen3-30B-A3B and Mixtral-8x7B, for models whose weights are
 * generated rather than loaded. Throws on an unknown name.
 */
export function syntheticConfig(name: string): ModelConfig {
  if (name === "synthetic:qwen3-30b-a3b") {
    return freezeConfig({
      name,
      architecture: "Qwen3MoeForCausalLM",
      synthetic: true,
      hiddenSize: 2048,
      numLayers: 48,
      numHeads: 32,
      numKvHeads: 4,
      headDim: 128,
      intermediateSize: 6144,
      moeIntermediateSize: 768,
      numExperts: 128,
      numExpertsPerTok: 8,
      normTopkProb: true,
      qkNorm: true,
      rmsNormEps: 1e-6,
      ropeTheta: 1e6,
      vocabSize: 151936,
      maxPositionEmbeddings: 40960,
      tieWordEmbeddings: false,
      bosTokenId: 151643,
      eosTokenIds: [151645, 151643],
      dtype: "bf16",
      layerKinds: new Array<LayerKind>(48).fill("moe"),
    });
  }
  if (name === "synthetic:mixtral-8x7b") {
    return freezeConfig({
      name,
      architecture: "MixtralForCausalLM",
      synthetic: true,
      hiddenSize: 4096,
      numLayers: 32,
      numHeads: 32,
      numKvHeads: 8,
      headDim: 128,
      intermediateSize: 14336,
      moeIntermediateSize: 14336,
      numExperts: 8,
      numExpertsPerTok: 2,
      normTopkProb: true,
      qkNorm: false,
      rmsNormEps: 1e-5,
      ropeTheta: 1e6,
      vocabSize: 32000,
      maxPositionEmbeddings: 32768,
      tieWordEmbeddings: false,
      bosTokenId: 1,
      eosTokenIds: [2],
      dtype: "bf16",
      layerKinds: new Array<LayerKind>(32).fill("moe"),
    });
  }
  throw new Error(
    `unknown synthetic model "${name}" (known: ${SYNTHETIC_MODEL_NAMES.join(", ")})`,
  );
}

/** `synthetic:NAME` -> syntheticConfig, anything else -> loadModelConfig(dir). */
export function resolveModelConfig(spec: string): ModelConfig {
  return spec.startsWith("synthetic:") ? syntheticConfig(spec) : loadModelConfig(spec);
}

function freezeConfig(config: ModelConfig): ModelConfig {
  return Object.freeze({
    ...config,
    eosTokenIds: Object.freeze([...config.eosTokenIds]),
    layerKinds: Object.freeze([...config.layerKinds]),
  });
}

function readJson(path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new Error(`${path}: not valid JSON: ${(err as Error).message}`);
  }
}

/**
 * rope_theta from transformers 5 `rope_parameters` or transformers 4 top level. Both blocks are
 * checked: transformers 5 runs `rope_scaling` where a config has both (a YaRN block added to a
 * transformers-5 config, as model cards suggest), so a non-default type in either is refused.
 */
function parseRope(c: Record<string, unknown>, name: string): number {
  let theta = c.rope_theta;
  for (const field of ["rope_parameters", "rope_scaling"] as const) {
    const params = c[field];
    if (params === undefined || params === null) continue;
    if (typeof params !== "object" || Array.isArray(params)) {
      throw new Error(`${name}: field "${field}" is not an object`);
    }
    const p = params as Record<string, unknown>;
    const type = p.rope_type ?? p.type ?? "default";
    if (type !== "default") {
      throw new Error(`${name}: unsupported rope type "${type}" in "${field}" (only "default")`);
    }
    if (p.rope_theta !== undefined && (field === "rope_parameters" || theta === undefined)) {
      theta = p.rope_theta;
    }
  }
  if (theta === undefined || theta === null) throw new Error(`${name}: missing field "rope_theta"`);
  if (typeof theta !== "number" || !(theta > 0)) {
    throw new Error(`${name}: field "rope_theta" must be a positive number, got ${theta}`);
  }
  return theta;
}

function parseDtype(c: Record<string, unknown>, name: string): WeightDtype {
  const d = c.dtype ?? c.torch_dtype ?? "float32";
  switch (d) {
    case "float32":
      return "f32";
    case "float16":
      return "f16";
    case "bfloat16":
      return "bf16";
    default:
      throw new Error(`${name}: unsupported dtype ${JSON.stringify(d)}`);
  }
}

function expertCount(c: Record<string, unknown>, f: Fields, name: string, min: number): number {
  const key = c.num_experts !== undefined ? "num_experts" : "num_local_experts";
  if (c[key] === undefined) {
    throw new Error(`${name}: missing field "num_experts" / "num_local_experts"`);
  }
  return min === 0 ? f.nonNegativeInt(key) : f.positiveInt(key);
}

function tokenIds(v: unknown, what: string): number[] {
  if (v === undefined || v === null) return [];
  const list = Array.isArray(v) ? v : [v];
  if (!list.every((x) => Number.isInteger(x) && x >= 0)) {
    throw new Error(`${what} must be a token id or a list of them, got ${JSON.stringify(v)}`);
  }
  return list as number[];
}

class Fields {
  constructor(private readonly c: Record<string, unknown>, private readonly name: string) {}

  positiveInt(key: string): number {
    const v = this.required(key);
    if (!Number.isSafeInteger(v) || (v as number) <= 0) {
      throw new Error(`${this.name}: field "${key}" must be a positive integer, got ${v}`);
    }
    return v as number;
  }

  nonNegativeInt(key: string): number {
    const v = this.required(key);
    if (!Number.isSafeInteger(v) || (v as number) < 0) {
      throw new Error(`${this.name}: field "${key}" must be a non-negative integer, got ${v}`);
    }
    return v as number;
  }

  positiveNumber(key: string): number {
    const v = this.required(key);
    if (typeof v !== "number" || !(v > 0)) {
      throw new Error(`${this.name}: field "${key}" must be a positive number, got ${v}`);
    }
    return v;
  }

  optionalString(key: string, fallback: string): string {
    const v = this.c[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "string") {
      throw new Error(`${this.name}: field "${key}" must be a string, got ${JSON.stringify(v)}`);
    }
    return v;
  }

  optionalBoolean(key: string, fallback: boolean): boolean {
    const v = this.c[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "boolean") {
      throw new Error(`${this.name}: field "${key}" must be a boolean, got ${JSON.stringify(v)}`);
    }
    return v;
  }

  private required(key: string): unknown {
    const v = this.c[key];
    if (v === undefined || v === null) throw new Error(`${this.name}: missing field "${key}"`);
    return v;
  }
}
