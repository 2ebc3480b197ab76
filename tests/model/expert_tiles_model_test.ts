/**
 * The model with its MoE expert weights in tiles (GpuModelOptions.moeExpertTiles) gives the
 * logits of the model with them row by row: a checkpoint of tiny-qwen3-moe's recipe widened to
 * hidden 128 and expert width 128 (two 64-column tiles a row; at 64 a row is one tile and tiles
 * lie as rows do), prefill then decode steps of two sequences, f16. Shapes that are not whole
 * tiles, f32 weights and dense models are refused by name.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { GpuModel, type GpuModelOptions } from "../../src/model/gpu_model.ts";
import { ensureFixture, ensureRecipeFixture, fixtureRecipes } from "../../scripts/fixtures.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { maxAbsDiff, prefillThenDecode } from "./gpu_model_step.ts";

function wideFixture(): string {
  const base = fixtureRecipes()["tiny-qwen3-moe"];
  const recipe = {
    ...base,
    about: "tiny-qwen3-moe widened to hidden 128 and expert width 128 (expert-tiles test)",
    seed: `${base.seed}/wide`,
    config: { ...base.config, hidden_size: 128, moe_intermediate_size: 128 },
  };
  return ensureRecipeFixture("tiny-qwen3-moe-wide", recipe, join(tmpdir(), "webfpm-fixtures"))
    .dir;
}

async function logits(dir: string, options: GpuModelOptions): Promise<Float32Array[]> {
  const model = await GpuModel.load(await sharedGpu(), dir, {
    dtype: "f16",
    numBlocks: 32,
    maxModelLen: 64,
    maxNumSeqs: 4,
    maxNumTokens: 64,
    ...options,
  });
  try {
    return await prefillThenDecode(model, [[1, 2, 3, 4], [5, 6, 7, 8]], 3, true);
  } finally {
    model.destroy();
  }
}

test("expert weights in tiles give the logits of the same weights row by row", async () => {
  const gpu = await sharedGpu();
  if (!gpu.f16) return; // the tiled forms store f16
  const dir = wideFixture();
  const rows = await logits(dir, {});
  const tiles = await logits(dir, { moeExpertTiles: true });
  assert.is(rows.length, tiles.length);
  for (let i = 0; i < rows.length; i++) {
    const scale = rows[i].reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    assert.ok(scale > 0);
    assert.ok(maxAbsDiff(rows[i], tiles[i]) <= 1e-3 * scale, `step ${i}`);
  }
});

test("expert weights in tiles are refused where they cannot be", async () => {
  const gpu = await sharedGpu();
  const narrow = ensureFixture("tiny-qwen3-moe").dir; // expert width 32
  const err = (o: GpuModelOptions) =>
    GpuModel.load(gpu, narrow, { numBlocks: 8, ...o }).then(() => "loaded", (e) => e.message);
  assert.match(
    await err({ dtype: "f16", moeExpertTiles: true }),
    /expert weights in tiles need f16 and hidden and expert width multiples of 64 \(have f16, 64, 32\)/,
  );
  assert.match(await err({ dtype: "f32", moeExpertTiles: true }), /need f16/);
  const dense = ensureFixture("tiny-qwen3").dir;
  assert.match(
    await GpuModel.load(gpu, dense, { numBlocks: 8, moeExpertTiles: true }).then(
      () => "loaded",
      (e) => e.message,
    ),
    /has no MoE layers/,
  );
});

test.run();
