import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { Checkpoint } from "../../src/model/checkpoint.ts";
import { referenceLogits, ReferenceModel } from "../../src/model/reference_model.ts";
import {
  attentionTensorNames,
  denseMlpTensorNames,
  EMBED_TENSOR,
  expertTensorNames,
  FINAL_NORM_TENSOR,
  lmHeadTensorName,
  routerTensorName,
} from "../../src/model/model_tensors.ts";
import { matVec, rmsNorm, softmax, swiglu, topK } from "../../src/model/reference_ops.ts";
import { SafetensorsWriter } from "../../src/model/safetensors_writer.ts";
import { ModelTokenizer } from "../../src/model/tokenizer.ts";

const dirs = {
  "tiny-qwen3-moe": ensureFixture("tiny-qwen3-moe").dir,
  "tiny-mixtral": ensureFixture("tiny-mixtral").dir,
  "tiny-qwen3": ensureFixture("tiny-qwen3").dir,
};
const models = Object.fromEntries(
  Object.entries(dirs).map(([name, dir]) => [name, ReferenceModel.load(dir)]),
) as Record<keyof typeof dirs, ReferenceModel>;
const prompt = [
  ...ModelTokenizer.fromDir(dirs["tiny-qwen3"]).encode("The quick brown fox, naïve café 你好!"),
];

function rows(logits: Float32Array, vocab: number, from: number, to: number): Float32Array {
  return logits.subarray(from * vocab, to * vocab);
}

function sameArrays(a: Float32Array, b: Float32Array, what: string) {
  assert.is(a.length, b.length, what);
  const i = a.findIndex((v, k) => !Object.is(v, b[k]));
  assert.ok(i === -1, `${what}: first difference at ${i}: ${a[i]} vs ${b[i]}`);
}

/**
 * A copy of a checkpoint with config.json changes and tensors replaced, added or dropped
 * (one file, tensors in name order).
 */
function variant(
  src: string,
  configPatch: Record<string, unknown>,
  tensors: { drop?: string[]; add?: Record<string, string> } = {},
): string {
  const out = mkdtempSync(join(tmpdir(), "webfpm-ref-"));
  const config = { ...JSON.parse(readFileSync(join(src, "config.json"), "utf8")), ...configPatch };
  writeFileSync(join(out, "config.json"), JSON.stringify(config));
  const ckpt = Checkpoint.open(src);
  // add: new name -> existing tensor whose bytes it copies
  const plan = ckpt.names().filter((n) => !tensors.drop?.includes(n)).map((n) => [n, n]);
  plan.push(...Object.entries(tensors.add ?? {}));
  plan.sort(([a], [b]) => a < b ? -1 : 1);
  const w = SafetensorsWriter.create(
    join(out, "model.safetensors"),
    plan.map(([name, from]) => ({
      name,
      dtype: ckpt.info(from).dtype,
      shape: ckpt.info(from).shape,
    })),
  );
  for (const [, from] of plan) w.write(ckpt.read(from));
  w.close();
  ckpt.close();
  return out;
}

test("logits are [tokens, vocab], finite and spread out, for every architecture", () => {
  for (const [name, model] of Object.entries(models)) {
    const logits = referenceLogits(model, prompt);
    assert.is(logits.length, prompt.length * model.config.vocabSize, name);
    assert.ok(logits.every(Number.isFinite), `${name}: finite`);
    const last = rows(logits, model.config.vocabSize, prompt.length - 1, prompt.length);
    const mean = last.reduce((a, b) => a + b, 0) / last.length;
    const std = Math.sqrt(last.reduce((a, b) => a + (b - mean) ** 2, 0) / last.length);
    assert.ok(std > 0.5 && std < 10, `${name}: logit std ${std} is neither flat nor degenerate`);
  }
});

test("the same weights and tokens give bit-identical logits on a fresh load", () => {
  const again = ReferenceModel.load(dirs["tiny-qwen3-moe"]);
  sameArrays(
    referenceLogits(again, prompt),
    referenceLogits(models["tiny-qwen3-moe"], prompt),
    "reload",
  );
});

test("prefill followed by decode steps gives the logits of one long prefill", () => {
  for (const [name, model] of Object.entries(models)) {
    const vocab = model.config.vocabSize;
    const full = referenceLogits(model, prompt);
    const cache = model.newCache();
    const prefill = model.forward(cache, prompt.slice(0, 5)).logits;
    sameArrays(prefill, rows(full, vocab, 0, 5), `${name} prefill`);
    for (let t = 5; t < prompt.length; t++) {
      const step = model.forward(cache, [prompt[t]]).logits;
      sameArrays(step, rows(full, vocab, t, t + 1), `${name} decode at position ${t}`);
    }
    assert.is(cache.length, prompt.length);
  }
});

test("a lone first token attends only to itself: each head outputs v of its GQA group", () => {
  // Recomputed here from the checkpoint with q and k left out (one position: softmax = [1]).
  for (const name of ["tiny-qwen3", "tiny-mixtral"] as const) {
    const model = models[name];
    const c = model.config;
    const ckpt = Checkpoint.open(dirs[name]);
    const w = (n: string) => ckpt.readF32(n);
    const id = 4321;
    let x = w(EMBED_TENSOR).slice(id * c.hiddenSize, (id + 1) * c.hiddenSize);
    for (let l = 0; l < c.numLayers; l++) {
      const a = attentionTensorNames(c, l);
      const v = matVec(
        w(a.v),
        rmsNorm(x, w(a.inputNorm), c.rmsNormEps),
        c.numKvHeads * c.headDim,
        c.hiddenSize,
      );
      const attn = new Float32Array(c.numHeads * c.headDim);
      const group = c.numHeads / c.numKvHeads;
      for (let h = 0; h < c.numHeads; h++) {
        const kv = Math.floor(h / group);
        attn.set(v.subarray(kv * c.headDim, (kv + 1) * c.headDim), h * c.headDim);
      }
      const o = matVec(w(a.o), attn, c.hiddenSize, c.numHeads * c.headDim);
      x = x.map((xi, i) => xi + o[i]);
      const h2 = rmsNorm(x, w(a.postAttentionNorm), c.rmsNormEps);
      let ffn: Float32Array;
      if (c.layerKinds[l] === "dense") {
        const m = denseMlpTensorNames(l);
        ffn = swiglu(h2, w(m.gate), w(m.up), w(m.down), c.hiddenSize, c.intermediateSize);
      } else {
        const p = softmax(matVec(w(routerTensorName(c, l)), h2, c.numExperts, c.hiddenSize));
        const top = topK(p, c.numExpertsPerTok);
        const sum = top.reduce((s, e) => s + p[e], 0);
        ffn = new Float32Array(c.hiddenSize);
        for (const e of top) {
          const m = expertTensorNames(c, l, e);
          const out = swiglu(
            h2,
            w(m.gate),
            w(m.up),
            w(m.down),
            c.hiddenSize,
            c.moeIntermediateSize,
          );
          out.forEach((v, i) => ffn[i] += Math.fround(p[e] / sum) * v);
        }
      }
      x = x.map((xi, i) => xi + ffn[i]);
    }
    const head = w(lmHeadTensorName(c));
    const logits = matVec(
      head,
      rmsNorm(x, w(FINAL_NORM_TENSOR), c.rmsNormEps),
      c.vocabSize,
      c.hiddenSize,
    );
    ckpt.close();
    const ref = referenceLogits(model, [id]);
    const worst = ref.reduce((m, v, i) => Math.max(m, Math.abs(v - logits[i])), 0);
    assert.ok(worst < 1e-4, `${name}: max |difference| ${worst}`);
  }
});

test("a token's logits depend on the tokens before it (attention reads the cache)", () => {
  const model = models["tiny-mixtral"];
  const vocab = model.config.vocabSize;
  const a = referenceLogits(model, [100, 200]);
  const b = referenceLogits(model, [101, 200]);
  assert.not.equal([...rows(a, vocab, 1, 2).slice(0, 64)], [...rows(b, vocab, 1, 2).slice(0, 64)]);
});

test("MoE layers route each token to top-k distinct experts; dense layers do not route", () => {
  const model = models["tiny-qwen3-moe"];
  const { routes } = model.forward(model.newCache(), prompt);
  assert.equal([...new Set(routes.map((r) => r.layer))], [0, 2], "layer 1 is dense");
  assert.is(routes.length, 2 * prompt.length);
  for (const r of routes) {
    assert.is(new Set(r.experts).size, 2);
    assert.ok(r.experts.every((e) => e >= 0 && e < 8));
    assert.ok(Math.abs(r.weights[0] + r.weights[1] - 1) < 1e-6, "norm_topk_prob renormalizes");
    assert.ok(r.weights[0] >= r.weights[1], "highest probability first");
  }
  assert.equal(routes.filter((r) => r.layer === 0).map((r) => r.position), prompt.map((_, i) => i));
  const used = new Set(routes.flatMap((r) => r.experts));
  assert.ok(used.size >= 4, `random routers spread tokens over experts (${used.size} used)`);
});

test("Mixtral's router renormalizes over its top-k experts", () => {
  const model = models["tiny-mixtral"];
  for (const r of model.forward(model.newCache(), prompt).routes) {
    assert.ok(Math.abs(r.weights[0] + r.weights[1] - 1) < 1e-6);
  }
});

test("tied embeddings: an untied copy whose lm_head equals the embedding gives the same logits", () => {
  const dir = variant(dirs["tiny-qwen3"], { tie_word_embeddings: false }, {
    add: { "lm_head.weight": "model.embed_tokens.weight" },
  });
  const untied = ReferenceModel.load(dir);
  assert.is(untied.config.tieWordEmbeddings, false);
  sameArrays(
    referenceLogits(untied, prompt),
    referenceLogits(models["tiny-qwen3"], prompt),
    "untied copy",
  );
});

test("untied embeddings: the LM head is lm_head.weight, not the embedding", () => {
  const dir = variant(dirs["tiny-qwen3-moe"], { tie_word_embeddings: true }, {
    drop: ["lm_head.weight"],
  });
  const tied = ReferenceModel.load(dir);
  const vocab = tied.config.vocabSize;
  const a = rows(referenceLogits(tied, prompt.slice(0, 2)), vocab, 1, 2);
  const b = rows(referenceLogits(models["tiny-qwen3-moe"], prompt.slice(0, 2)), vocab, 1, 2);
  assert.not.equal([...a.slice(0, 64)], [...b.slice(0, 64)]);
});

test("loading a checkpoint that lacks a tensor names the tensor", () => {
  const missing = "model.layers.2.self_attn.k_norm.weight";
  const dir = variant(dirs["tiny-qwen3-moe"], {}, { drop: [missing] });
  assert.throws(
    () => ReferenceModel.load(dir),
    /missing tensor "model\.layers\.2\.self_attn\.k_norm\.weight"/,
  );
});

test("rounding weights to f16 changes nothing for an f16 checkpoint", () => {
  const rounded = ReferenceModel.load(dirs["tiny-mixtral"], { roundWeightsToF16: true });
  sameArrays(
    referenceLogits(rounded, prompt),
    referenceLogits(models["tiny-mixtral"], prompt),
    "f16",
  );
});

test("a token id outside the vocabulary is refused", () => {
  const model = models["tiny-qwen3"];
  assert.throws(
    () => referenceLogits(model, [1, model.config.vocabSize]),
    /token id 151669 at index 1/,
  );
});

test.run();
