import { test } from "uvu";
import * as assert from "uvu/assert";
import { Rng } from "../../src/util/rng.ts";
import { moeRouterParams, moeRouterRef, spec } from "../../kernels/moe_router.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { dispatchOnce } from "./dispatch_once.ts";

async function route(logits: number[], experts: number, topK: number, normTopk: boolean) {
  const tokens = logits.length / experts;
  const p = moeRouterParams({ tokens, experts, topK, normTopk });
  const out = await dispatchOnce(await sharedGpu(), spec, "f32", p, {
    logits: new Float32Array(logits),
  }, { topk_ids: tokens * topK * 4, topk_weights: tokens * topK * 4 });
  return { ids: [...new Int32Array(out.topk_ids)], weights: new Float32Array(out.topk_weights) };
}

test("ties go to the lower expert index, highest logit first", async () => {
  //          e0 e1 e2 e3 e4       e0..e4 all equal
  const rows = [1, 3, 3, 0, 3, /**/ 2, 2, 2, 2, 2];
  const { ids, weights } = await route(rows, 5, 2, true);
  assert.equal(ids, [1, 2, 0, 1]);
  assert.equal([...weights], [0.5, 0.5, 0.5, 0.5]);
});

test("with norm_topk a token's weights sum to 1; without, they are its softmax probabilities", async () => {
  const rng = Rng.fromSeed("router norm");
  const experts = 128, topK = 8, tokens = 6;
  const logits = [...rng.fillNormal(new Float32Array(tokens * experts), 2)];
  const norm = await route(logits, experts, topK, true);
  const raw = await route(logits, experts, topK, false);
  assert.equal(norm.ids, raw.ids);
  for (let t = 0; t < tokens; t++) {
    const row = logits.slice(t * experts, (t + 1) * experts);
    const max = Math.max(...row);
    const total = row.reduce((a, l) => a + Math.exp(l - max), 0);
    let sum = 0;
    for (let j = 0; j < topK; j++) {
      sum += norm.weights[t * topK + j];
      const e = raw.ids[t * topK + j];
      const p = Math.exp(row[e] - max) / total;
      assert.ok(Math.abs(raw.weights[t * topK + j] - p) < 1e-6, `token ${t} expert ${e}`);
      if (j > 0) assert.ok(raw.weights[t * topK + j] <= raw.weights[t * topK + j - 1]);
    }
    assert.ok(Math.abs(sum - 1) < 1e-6, `token ${t}: weights sum to ${sum}`);
  }
});

test("Mixtral's softmax over the top-k logits equals the renormalized top-k probabilities", () => {
  const rng = Rng.fromSeed("mixtral routing");
  const logits = rng.fillNormal(new Float32Array(16 * 8), 3);
  const r = moeRouterRef(
    logits,
    moeRouterParams({ tokens: 16, experts: 8, topK: 2, normTopk: true }),
  );
  for (let t = 0; t < 16; t++) {
    const top = [0, 1].map((j) => logits[t * 8 + r.ids[t * 2 + j]]);
    const m = Math.max(...top);
    const z = top.reduce((a, l) => a + Math.exp(l - m), 0);
    for (let j = 0; j < 2; j++) {
      assert.ok(Math.abs(r.weights[t * 2 + j] - Math.exp(top[j] - m) / z) < 1e-7);
    }
  }
});

test("router params refuse top_k above the experts or 16, and more than 512 experts", () => {
  assert.throws(
    () => moeRouterParams({ tokens: 1, experts: 4, topK: 5, normTopk: true }),
    /top_k = 5/,
  );
  assert.throws(
    () => moeRouterParams({ tokens: 1, experts: 64, topK: 17, normTopk: true }),
    /top_k/,
  );
  assert.throws(
    () => moeRouterParams({ tokens: 1, experts: 513, topK: 2, normTopk: true }),
    /experts = 513/,
  );
});

test.run();
