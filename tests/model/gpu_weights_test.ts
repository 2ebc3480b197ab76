/**
 * GpuWeights' placements: drawn on the GPU (synthetic) a weight holds the same values as a
 * buffer of its own, as a range of the arena, or of one of the arenas an adapter with smaller
 * buffers takes (the tiny Qwen3-MoE fixture's shapes).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { readBuffer } from "../../src/gpu/buffers.ts";
import { resolveModelConfig } from "../../src/model/config.ts";
import type { BufferRange } from "../../src/gpu/buffer_ranges.ts";
import { GpuWeights } from "../../src/model/gpu_weights.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("synthetic weights drawn into the arena equal those drawn a buffer each", async () => {
  const gpu = await sharedGpu();
  const config = resolveModelConfig(ensureFixture("tiny-qwen3-moe").dir);
  const each = await GpuWeights.synthetic(gpu, config, "f32", { placement: "each" });
  const arena = await GpuWeights.synthetic(gpu, config, "f32", { placement: "arena" });
  // an adapter whose largest buffer holds about half the model: the weights in two arenas
  const small = { ...gpu, limits: { ...gpu.limits, maxBufferSize: 48 * 2 ** 20 } };
  const split = await GpuWeights.synthetic(small, config, "f32", { placement: "arena" });
  try {
    assert.is(arena.bufferCount, 1);
    assert.ok(each.bufferCount > 10);
    assert.ok(split.bufferCount >= 2, `${split.bufferCount} arenas`);
    assert.ok(split.lmHead.buffer !== split.embed.buffer, "the LM head in an arena of its own");
    const read = async (w: BufferRange) =>
      new Uint8Array(await readBuffer(gpu.device, w.buffer, w.size, w.offset));
    const pick = (w: GpuWeights) => [
      w.embed,
      w.lmHead,
      w.finalNorm,
      ...w.layers.flatMap((l) => [l.qkv, l.o, l.gateUp, l.down, l.postNorm]),
    ];
    const [a, b, c] = [pick(each), pick(arena), pick(split)];
    for (let i = 0; i < a.length; i++) {
      assert.is(b[i].size, a[i].size);
      assert.ok(c[i].offset + c[i].size <= 48 * 2 ** 20);
      const [x, y, z] = [await read(a[i]), await read(b[i]), await read(c[i])];
      assert.ok(x.some((v) => v !== 0), `weight ${i} drawn`);
      assert.equal(y, x, `weight ${i}`);
      assert.equal(z, x, `weight ${i} (arenas of 48 MiB)`);
    }
  } finally {
    each.destroy();
    arena.destroy();
    split.destroy();
  }
});

test.run();
