import { test } from "uvu";
import * as assert from "uvu/assert";
import { resolveModelConfig } from "../../src/model/config.ts";
import { expectedExpertsTouched, rooflineBytes, stepCost } from "../../src/model/step_cost.ts";

const config = resolveModelConfig("synthetic:qwen3-30b-a3b");
const decode64 = {
  seqs: Array.from({ length: 64 }, () => ({ queryLen: 1, contextLen: 1024 })),
  sampledRows: 64,
};

test("the fused forms move costs between labels, not in or out of the step", () => {
  const apart = stepCost(config, "f16", decode64);
  const fused = stepCost(config, "f16", decode64, { routerInOnePass: true, combineNorm: true });
  const L = config.numLayers, E = config.numExperts, H = config.hiddenSize;
  // the router's GEMV is part of `moe router`
  assert.is(fused.byLabel.get("linear router"), undefined);
  const router = apart.byLabel.get("linear router")!;
  assert.is(router.bytes, L * (E * H * 2 + 64 * H * 4 + 64 * E * 4));
  assert.is(
    fused.byLabel.get("moe router")!.bytes,
    apart.byLabel.get("moe router")!.bytes + router.bytes,
  );
  assert.is(fused.byLabel.get("moe router")!.calls, L);
  // every layer after a MoE layer gets its input norm from the combine (all 48 are MoE layers)
  assert.is(apart.byLabel.get("rmsnorm")!.calls, 2 * L + 1);
  assert.is(fused.byLabel.get("rmsnorm")!.calls, 2 * L + 1 - (L - 1));
  assert.ok(fused.byLabel.get("moe combine")!.bytes > apart.byLabel.get("moe combine")!.bytes);
  assert.is(fused.byLabel.get("moe combine")!.calls, L);
  assert.is(fused.totalBytes, apart.totalBytes);
  assert.is(fused.totalFlops, apart.totalFlops);
  assert.is(rooflineBytes(fused), rooflineBytes(apart));
});

test("the router's fused norm moves the MoE layers' input norms into moe router, less one read of their rows", () => {
  const onePass = stepCost(config, "f16", decode64, { routerInOnePass: true, combineNorm: true });
  const normed = stepCost(config, "f16", decode64, {
    routerInOnePass: true,
    routerNorm: true,
    combineNorm: true,
  });
  const L = config.numLayers, H = config.hiddenSize, T = 64;
  // 48 MoE layers: the first layer's input norm and the final norm stay
  assert.is(normed.byLabel.get("rmsnorm")!.calls, 2);
  assert.is(normed.byLabel.get("moe router")!.calls, L);
  const normBytes = T * H * 8 + H * 2;
  assert.is(
    normed.byLabel.get("rmsnorm")!.bytes,
    onePass.byLabel.get("rmsnorm")!.bytes - L * normBytes,
  );
  assert.is(
    normed.byLabel.get("moe router")!.bytes,
    onePass.byLabel.get("moe router")!.bytes + L * (normBytes - T * H * 4),
  );
  assert.is(normed.totalBytes, onePass.totalBytes - L * T * H * 4);
  assert.is(normed.totalFlops, onePass.totalFlops);
  // routerNorm counts only where the step routes in one pass
  const apart = stepCost(config, "f16", decode64, {
    routerInOnePass: false,
    routerNorm: true,
    combineNorm: true,
  });
  assert.is(apart.byLabel.get("rmsnorm")!.calls, onePass.byLabel.get("rmsnorm")!.calls);
});

const decodeShape = (batch: number, ctx: number) => ({
  seqs: Array.from({ length: batch }, () => ({ queryLen: 1, contextLen: ctx })),
  sampledRows: batch,
});

test("expectedExpertsTouched is the mean count of distinct experts under uniform top-8-of-128 routing", () => {
  let seed = 0x9e3779b9;
  const rnd = () => {
    // xorshift32
    seed ^= seed << 13;
    seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    seed >>>= 0;
    return seed / 2 ** 32;
  };
  for (const B of [8, 32, 64]) {
    const trials = 1500;
    let sum = 0;
    for (let t = 0; t < trials; t++) {
      const hit = new Uint8Array(128);
      for (let b = 0; b < B; b++) {
        const perm = Array.from({ length: 128 }, (_, i) => i);
        for (let i = 0; i < 8; i++) {
          const j = i + Math.floor(rnd() * (128 - i));
          [perm[i], perm[j]] = [perm[j], perm[i]];
          hit[perm[i]] = 1;
        }
      }
      for (const h of hit) sum += h;
    }
    const mc = sum / trials, formula = expectedExpertsTouched(128, 8, B);
    assert.ok(Math.abs(mc / formula - 1) < 0.01, `B=${B}: simulated ${mc}, formula ${formula}`);
  }
});

test("the decode roofline is the weights touched, the KV read and the LM head, each once (no activations)", () => {
  const c = stepCost(config, "f16", decodeShape(64, 1024));
  const H = 2048, L = 48, es = 2;
  const attn = L * ((32 + 8) * 128 * H + H * 32 * 128) * es;
  const U = expectedExpertsTouched(128, 8, 64);
  const experts = L * (U * 3 * 768 * H + 128 * H) * es;
  const kv = L * 64 * 1024 * 4 * 128 * 2 * es;
  const lm = 151936 * H * es;
  assert.ok(Math.abs(rooflineBytes(c) / (attn + experts + kv + lm) - 1) < 1e-12);
  // activations are the rest of the step's bytes, and positive
  assert.ok(c.parts.activations > 0 && c.parts.activations < 0.03 * c.totalBytes);
});

test("prefill FLOPs match the PyTorch peer's count (2 x active parameters, causal attention halved)", () => {
  const [H, L, NQ, NKV, HD, E, K, I, V] = [2048, 48, 32, 4, 128, 128, 8, 768, 151936];
  for (const [b, t] of [[1, 2048], [8, 2048], [32, 512]] as const) {
    const ours = stepCost(config, "f16", {
      seqs: Array.from({ length: b }, () => ({ queryLen: t, contextLen: t })),
      sampledRows: b,
    }).totalFlops;
    const active = L * ((NQ + 2 * NKV) * HD * H + H * NQ * HD + E * H + K * 3 * I * H) + V * H / t;
    const peer = 2 * active * b * t + L * b * 4 * (t * t / 2) * NQ * HD;
    assert.ok(Math.abs(ours / peer - 1) < 0.001, `${b} x ${t}: ${ours} vs ${peer}`);
  }
});

test.run();
