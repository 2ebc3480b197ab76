import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  isMoeModel,
  loadModelConfig,
  parseModelConfig,
  resolveModelConfig,
  syntheticConfig,
} from "../../src/model/config.ts";

/** Qwen3-30B-A3B's config.json as transformers 4 writes it. */
const qwen3MoeV4 = {
  architectures: ["Qwen3MoeForCausalLM"],
  attention_bias: false,
  bos_token_id: 151643,
  decoder_sparse_step: 1,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: "silu",
  hidden_size: 2048,
  intermediate_size: 6144,
  max_position_embeddings: 40960,
  mlp_only_layers: [],
  model_type: "qwen3_moe",
  moe_intermediate_size: 768,
  norm_topk_prob: true,
  num_attention_heads: 32,
  num_experts: 128,
  num_experts_per_tok: 8,
  num_hidden_layers: 48,
  num_key_value_heads: 4,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000.0,
  sliding_window: null,
  tie_word_embeddings: false,
  torch_dtype: "bfloat16",
  use_sliding_window: false,
  vocab_size: 151936,
};

/** Mixtral-8x7B's config.json (transformers 4: no head_dim, num_local_experts). */
const mixtralV4 = {
  architectures: ["MixtralForCausalLM"],
  bos_token_id: 1,
  eos_token_id: 2,
  hidden_act: "silu",
  hidden_size: 4096,
  intermediate_size: 14336,
  max_position_embeddings: 32768,
  model_type: "mixtral",
  num_attention_heads: 32,
  num_experts_per_tok: 2,
  num_hidden_layers: 32,
  num_key_value_heads: 8,
  num_local_experts: 8,
  rms_norm_eps: 1e-5,
  rope_theta: 1000000.0,
  sliding_window: null,
  tie_word_embeddings: false,
  torch_dtype: "bfloat16",
  vocab_size: 32000,
};

function without<T extends Record<string, unknown>>(o: T, key: string): Record<string, unknown> {
  const copy: Record<string, unknown> = { ...o };
  delete copy[key];
  return copy;
}

test("Qwen3-30B-A3B's real config.json normalizes to the synthetic qwen3-30b-a3b shapes", () => {
  const parsed = parseModelConfig(qwen3MoeV4, {
    name: "qwen3",
    generationConfig: { eos_token_id: [151645, 151643] },
  });
  const synthetic = syntheticConfig("synthetic:qwen3-30b-a3b");
  assert.equal({ ...parsed, name: "", synthetic: true }, { ...synthetic, name: "" });
  assert.ok(Object.isFrozen(parsed) && Object.isFrozen(parsed.layerKinds));
  assert.ok(isMoeModel(parsed));
});

test("Mixtral-8x7B's config.json normalizes to the synthetic mixtral-8x7b shapes", () => {
  const parsed = parseModelConfig(mixtralV4);
  const synthetic = syntheticConfig("synthetic:mixtral-8x7b");
  assert.equal({ ...parsed, name: "", synthetic: true }, { ...synthetic, name: "" });
  assert.is(parsed.headDim, 128);
  assert.is(parsed.qkNorm, false);
  assert.is(parsed.normTopkProb, true);
});

test("a transformers 5 config (rope_parameters, num_local_experts, dtype) equals its v4 twin", () => {
  const v5 = {
    ...without(without(without(qwen3MoeV4, "rope_theta"), "num_experts"), "torch_dtype"),
    rope_parameters: { rope_theta: 1000000.0, rope_type: "default" },
    num_local_experts: 128,
    dtype: "bfloat16",
  };
  assert.equal(parseModelConfig(v5, { name: "x" }), parseModelConfig(qwen3MoeV4, { name: "x" }));
});

test("mlp_only_layers and decoder_sparse_step make dense layers", () => {
  const small = { ...qwen3MoeV4, num_hidden_layers: 6 };
  assert.equal(
    parseModelConfig({ ...small, mlp_only_layers: [1, 4] }).layerKinds,
    ["moe", "dense", "moe", "moe", "dense", "moe"],
  );
  assert.equal(
    parseModelConfig({ ...small, decoder_sparse_step: 2 }).layerKinds,
    ["dense", "moe", "dense", "moe", "dense", "moe"],
  );
  const dense = parseModelConfig({ ...small, num_experts: 0, num_experts_per_tok: 0 });
  assert.ok(
    false === isMoeModel(dense),
    "zero experts means every layer is dense",
  );
});

test("norm_topk_prob defaults to false for Qwen3-MoE, as transformers does", () => {
  assert.is(parseModelConfig(without(qwen3MoeV4, "norm_topk_prob")).normTopkProb, false);
});

test("a dense Qwen3 config has no experts, q/k norm, and tied embeddings when it says so", () => {
  const dense = parseModelConfig({
    ...without(
      without(without(qwen3MoeV4, "num_experts"), "moe_intermediate_size"),
      "num_experts_per_tok",
    ),
    architectures: ["Qwen3ForCausalLM"],
    tie_word_embeddings: true,
    num_hidden_layers: 2,
  });
  assert.equal(dense.layerKinds, ["dense", "dense"]);
  assert.equal([dense.numExperts, dense.numExpertsPerTok, dense.moeIntermediateSize], [0, 0, 0]);
  assert.ok(dense.qkNorm && dense.tieWordEmbeddings);
  assert.is(dense.intermediateSize, 6144);
});

test("eos ids come from config.json then generation_config.json, without duplicates", () => {
  const c = parseModelConfig(qwen3MoeV4, { generationConfig: { eos_token_id: [151645, 151643] } });
  assert.equal(c.eosTokenIds, [151645, 151643]);
  assert.is(c.bosTokenId, 151643);
  assert.equal(parseModelConfig(without(qwen3MoeV4, "eos_token_id")).eosTokenIds, []);
});

test("an unsupported architecture is named in the error", () => {
  assert.throws(
    () => parseModelConfig({ ...qwen3MoeV4, architectures: ["DeepseekV3ForCausalLM"] }),
    /unsupported architecture "DeepseekV3ForCausalLM"/,
  );
});

test("a rope type other than default is named in the error, in either config style", () => {
  assert.throws(
    () => parseModelConfig({ ...qwen3MoeV4, rope_scaling: { rope_type: "yarn", factor: 4 } }),
    /unsupported rope type "yarn"/,
  );
  assert.throws(
    () =>
      parseModelConfig({
        ...qwen3MoeV4,
        rope_parameters: { rope_type: "llama3", rope_theta: 5e5 },
      }),
    /unsupported rope type "llama3"/,
  );
});

test("a missing shape field is named in the error", () => {
  for (
    const field of ["hidden_size", "num_key_value_heads", "vocab_size", "moe_intermediate_size"]
  ) {
    assert.throws(
      () => parseModelConfig(without(qwen3MoeV4, field), { name: "cfg" }),
      new RegExp(`cfg: missing field "${field}"`),
    );
  }
  assert.throws(
    () => parseModelConfig(without(qwen3MoeV4, "rope_theta")),
    /missing field "rope_theta"/,
  );
  assert.throws(
    () => parseModelConfig(without(mixtralV4, "num_local_experts")),
    /missing field "num_experts" \/ "num_local_experts"/,
  );
  assert.throws(() => parseModelConfig(without(qwen3MoeV4, "architectures")), /"architectures"/);
});

test("inconsistent or unsupported settings are refused with the field named", () => {
  assert.throws(
    () => parseModelConfig({ ...qwen3MoeV4, num_key_value_heads: 5 }),
    /multiple of num_key_value_heads 5/,
  );
  assert.throws(() => parseModelConfig({ ...qwen3MoeV4, hidden_act: "gelu" }), /hidden_act "gelu"/);
  assert.throws(() => parseModelConfig({ ...qwen3MoeV4, attention_bias: true }), /attention_bias/);
  assert.throws(
    () => parseModelConfig({ ...mixtralV4, sliding_window: 4096 }),
    /sliding_window 4096/,
  );
  assert.throws(
    () => parseModelConfig({ ...qwen3MoeV4, num_experts_per_tok: 200 }),
    /num_experts_per_tok 200/,
  );
  assert.throws(() => parseModelConfig({ ...qwen3MoeV4, torch_dtype: "float8" }), /dtype "float8"/);
  assert.throws(
    () => parseModelConfig({ ...qwen3MoeV4, hidden_size: 0 }),
    /"hidden_size" must be a positive integer/,
  );
});

test("loadModelConfig reads config.json and generation_config.json from a directory", () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-config-"));
  assert.throws(() => loadModelConfig(dir), /no config.json/);
  writeFileSync(join(dir, "config.json"), JSON.stringify(mixtralV4));
  writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: [2, 7] }));
  const c = resolveModelConfig(dir);
  assert.equal(c.eosTokenIds, [2, 7]);
  assert.ok(c.name.endsWith("config.json"));
  writeFileSync(join(dir, "config.json"), "{oops");
  assert.throws(() => loadModelConfig(dir), /config.json: not valid JSON/);
});

test("synthetic names resolve and an unknown one lists the known names", () => {
  assert.is(resolveModelConfig("synthetic:mixtral-8x7b").numExperts, 8);
  const qwen = syntheticConfig("synthetic:qwen3-30b-a3b");
  assert.equal(
    [qwen.hiddenSize, qwen.numLayers, qwen.numHeads, qwen.numKvHeads, qwen.headDim],
    [2048, 48, 32, 4, 128],
  );
  assert.throws(() => syntheticConfig("synthetic:gpt-5"), /synthetic:qwen3-30b-a3b/);
});

test("a YaRN rope_scaling beside a transformers-5 rope_parameters is refused, not ignored", () => {
  // Qwen's model cards tell users to add this block to config.json for long context;
  // transformers 5 takes `rope_scaling or rope_parameters`, so it would run YaRN
  const { rope_theta: _theta, ...v4 } = qwen3MoeV4;
  const raw = {
    ...v4,
    rope_parameters: { rope_theta: 1000000.0, rope_type: "default" },
    rope_scaling: { rope_type: "yarn", factor: 4.0, original_max_position_embeddings: 32768 },
  };
  assert.throws(() => parseModelConfig(raw), /rope type "yarn"/);
});

test.run();
