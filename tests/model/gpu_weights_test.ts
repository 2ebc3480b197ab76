/**
 * GpuWeights' placements: drawn on the GPU (synthetic) a weight holds the same values as a
 * buffer of its own or as a range of the arena, for the tiny fixtures' shapes.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { readBuffer } from "../../src/gpu/buffers.ts";
import { resolveModelConfig } from "../../src/model/config.ts";
import { GpuWeights, type WeightBinding } from "../../src/model/gpu_weights.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("synthetic weights drawn into the arena equal those drawn a buffer each", async () => {
  const gpu = await sharedGpu();
  const config = resolveModelConfig(ensureFixture("tiny-qwen3-moe").dir);
  const each = await GpuWeights.synthetic(gpu, config, "f32", false, "each");
  const arena = await GpuWeights.synthetic(gpu, config, "f32", false, "arena");
  try {
    assert.is(arena.bufferCount, 1);
    assert.ok(each.bufferCount > 10);
    assert.is(arena.bytes >= each.bytes, true);
    const read = async (w: WeightBinding) =>
      new Uint8Array(await readBuffer(gpu.device, w.buffer, w.size, w.offset));
    const pick = (w: GpuWeights) => [
      w.embed,
      w.lmHead,
      w.finalNorm,
      ...w.layers.flatMap((l) => [l.qkv, l.o, l.gateUp, l.down, l.postNorm]),
    ];
    const [a, b] = [pick(each), pick(arena)];
    for (let i = 0; i < a.length; i++) {
      assert.is(b[i].size, a[i].size);
      const [x, y] = [await read(a[i]), await read(b[i])];
      assert.ok(x.some((v) => v !== 0), `weight ${i} drawn`);
      assert.equal(y, x, `weight ${i}`);
    }
  } finally {
    each.destroy();
    arena.destroy();
  }
});

test.run();
