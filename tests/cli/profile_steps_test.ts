/**
 * Profiled steps on the tiny MoE fixture: every dispatch is timed under its label, the
 * labels the cost model prices carry bytes, and the shapes are what was asked (decode:
 * B requests one token each at context C + 1; prefill: T tokens split over B).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { Engine } from "../../src/engine/engine.ts";
import { GpuModel } from "../../src/model/gpu_model.ts";
import { summarizeSpans } from "../../src/report/kernel_timings.ts";
import { balancedPartition, checkProfileShape, profileSteps } from "../../src/cli/profile_steps.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("balanced partition gives the remainder to the first parts", () => {
  assert.equal(balancedPartition(10, 4), [3, 3, 2, 2]);
  assert.equal(balancedPartition(4, 4), [1, 1, 1, 1]);
});

test("decode and prefill profiles time every dispatch and join the cost model", async () => {
  const gpu = await sharedGpu();
  assert.ok(gpu.timestamps, "the adapter has timestamp queries");
  const { dir } = await ensureFixture("tiny-qwen3-moe");
  const model = await GpuModel.load(gpu, dir, { profile: true, maxNumTokens: 64, maxNumSeqs: 8 });
  try {
    const engine = new Engine(model, { maxNumBatchedTokens: 64, maxNumSeqs: 8 });
    const decode = await profileSteps(engine, model, { batch: 2, ctx: 20, steps: 1 });
    assert.is(decode.length, 1);
    assert.equal(decode[0].shape.seqs, [{ queryLen: 1, contextLen: 22 }, {
      queryLen: 1,
      contextLen: 22,
    }]);
    const labels = new Set(decode[0].spans.map((s) => s.label));
    for (
      const l of [
        "embedding",
        "linear qkv",
        "paged_attention_decode",
        "moe gate_up",
        "moe down",
        "linear lmHead",
        "sample",
      ]
    ) {
      assert.ok(labels.has(l), `span ${l}`);
    }
    const summary = summarizeSpans(decode, { bandwidthGbps: 1 });
    const share = summary.rows.reduce((s, r) => s + r.share, 0);
    assert.ok(Math.abs(share - 1) < 1e-9);
    assert.ok(summary.rows.find((r) => r.label === "linear qkv")!.bytes! > 0);
    // two a layer and the final one, less the input norms a MoE layer's combine wrote before
    // and the MoE layers' own input norms, which their f16 router takes (moe_router_logits at 1-2
    // tokens, moe_router_norm from 3)
    const kinds = model.config.layerKinds;
    const fused = kinds.filter((k, l) => k === "moe" && l + 1 < kinds.length).length;
    assert.ok(fused > 0, "the fixture has a MoE layer followed by another");
    const moeLayers = kinds.filter((k) => k === "moe").length;
    const normingRouters = new Set(["moe_router_logits", "moe_router_norm"]);
    const routerNorms = decode[0].spans.filter((s) => normingRouters.has(s.kernel ?? "")).length;
    assert.is(routerNorms, model.weights.dtype === "f16" ? moeLayers : 0);
    assert.is(
      summary.rows.find((r) => r.label === "rmsnorm")!.calls,
      2 * model.config.numLayers + 1 - fused - routerNorms,
    );
    // and the cost model prices the same calls
    assert.is(
      model.stepCost(decode[0].shape).byLabel.get("rmsnorm")!.calls,
      2 * model.config.numLayers + 1 - fused - routerNorms,
    );

    const prefill = await profileSteps(engine, model, {
      batch: 2,
      ctx: 16,
      prefillTokens: 9,
      steps: 1,
    });
    assert.equal(prefill[0].shape.seqs, [{ queryLen: 5, contextLen: 21 }, {
      queryLen: 4,
      contextLen: 20,
    }]);
    assert.ok(prefill[0].spans.some((s) => s.label === "paged_attention"));
    assert.is(engine.kvUsage().numRequests, 0, "the profile's requests are gone");

    assert.throws(
      () => checkProfileShape(engine, { batch: 4, ctx: 0, prefillTokens: 2 }),
      /--prefill-tokens must be/,
    );
    assert.throws(
      () => checkProfileShape(engine, { batch: 1, ctx: 0 }),
      /decode profile needs --ctx >= 1/,
    );
  } finally {
    model.destroy();
  }
});

test.run();
