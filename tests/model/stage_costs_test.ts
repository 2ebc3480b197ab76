/**
 * What perf-decode's stage costs a layer mean (src/perf/stage_costs.ts): a stage's µs a step over
 * the layers it ran in, as the step recorded them, and none for a stage with a pass outside them.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { GpuModel } from "../../src/model/gpu_model.ts";
import { SyntheticDecode } from "../../src/perf/synthetic_steps.ts";
import { stageCostsJson } from "../../src/perf/stage_costs.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("a stage's µs a layer is over the layers it ran in (MoE stages of a mixed model too)", async () => {
  const gpu = await sharedGpu();
  const { dir } = await ensureFixture("tiny-qwen3-moe");
  const model = await GpuModel.load(gpu, dir, { maxNumTokens: 64, maxNumSeqs: 8 });
  try {
    const kinds = model.config.layerKinds;
    const moeLayers = kinds.filter((k) => k === "moe").length;
    assert.ok(moeLayers < kinds.length, `the fixture mixes dense and MoE layers: ${kinds}`);
    model.countStages = true;
    const steps = new SyntheticDecode(model, 8, 16, 2);
    await model.forward(steps.next()).sampled;
    await model.forward(steps.next()).sampled;
    const uses = model.lastStepStageUses, layers = model.lastStepStageLayers;
    model.countStages = false;
    // every stage adds 60 µs to the step
    const costs = {
      method: "repeat" as const,
      baseMs: [1, 1] as const,
      stages: [...uses].map(([stage, n]) => ({
        stage,
        uses: n,
        layers: layers.get(stage) ?? null,
        gpuMs: 1.06,
        usStep: 60,
      })),
    };
    const rows = new Map(
      (stageCostsJson(costs, null, 1e12).stages as {
        stage: string;
        dispatches: number;
        layers: number | null;
        us_layer: number | null;
      }[]).map((r) => [r.stage, r]),
    );
    // the router's two dispatches a MoE layer, and gate/up's one, over the MoE layers alone
    for (const stage of ["moe router", "moe gate_up"]) {
      const r = rows.get(stage)!;
      assert.is(r.layers, moeLayers, stage);
      assert.ok(Math.abs(r.us_layer! - 60 / moeLayers) < 1e-9, `${stage}: ${r.us_layer}`);
    }
    // the attention runs in every layer
    assert.is(rows.get("paged_attention_decode")!.layers, kinds.length);
    // sampling runs outside the layers: no figure a layer
    assert.equal([rows.get("sample")!.layers, rows.get("sample")!.us_layer], [null, null]);
  } finally {
    model.destroy();
  }
});

test.run();
