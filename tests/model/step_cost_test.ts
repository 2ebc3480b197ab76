import { test } from "uvu";
import * as assert from "uvu/assert";
import { resolveModelConfig } from "../../src/model/config.ts";
import { rooflineBytes, stepCost } from "../../src/model/step_cost.ts";

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

test.run();
