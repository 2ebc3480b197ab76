import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  decodePartialsSize,
  planDecodeSplits,
  spec as decodeSpec,
} from "../../kernels/paged_attention_decode.ts";
import { spec as prefillSpec } from "../../kernels/paged_attention.ts";
import { variantByName } from "../../kernels/kernel.ts";
import type { Gpu } from "../../src/gpu/device.ts";
import { decodeSplitMinTokens, decodeStepSplits } from "../../src/model/gpu_model.ts";

const QWEN3_30B = { numQHeads: 32, numKvHeads: 4 } as const;
const f16 = variantByName(decodeSpec, "f16");
const noGpu = { limits: {} } as unknown as Gpu;

test("64 x 1024 on Qwen3-30B-A3B: 4 splits of 256 keys, 1024 (seq, kv head, split) workgroups", () => {
  const plan = planDecodeSplits(Array(64).fill(1024), QWEN3_30B, f16);
  assert.equal(plan, { splitTokens: 256, numSplits: 4 });
});

test("8 x 131072: splits grow until the score buffer (4096 scores / 8 padded heads = 512 keys) caps them", () => {
  const plan = planDecodeSplits(Array(8).fill(131072), QWEN3_30B, f16);
  assert.equal(plan, { splitTokens: 512, numSplits: 256 });
});

test("Mixtral's 4 heads per kv head pad to 8: the same 512-key cap", () => {
  const plan = planDecodeSplits(Array(8).fill(131072), { numQHeads: 32, numKvHeads: 8 }, f16);
  assert.equal(plan, { splitTokens: 512, numSplits: 256 });
});

test("a single short context is one split: no merge dispatch", () => {
  assert.equal(planDecodeSplits([50], QWEN3_30B, f16), { splitTokens: 50, numSplits: 1 });
});

test("the splits cover the longest context of a mixed batch", () => {
  const lens = [3, 700, 9000, 17];
  const plan = planDecodeSplits(lens, QWEN3_30B, f16, 512);
  assert.ok(plan.numSplits * plan.splitTokens >= 9000);
  assert.ok((plan.numSplits - 1) * plan.splitTokens < 9000);
  assert.ok(plan.splitTokens * 8 <= f16.consts!.SCORES);
});

test("partials are sized for the plan, and not at all for one split", () => {
  assert.equal(decodePartialsSize(64, 32, 128, 4), {
    partO: 64 * 32 * 4 * 128,
    partLse: 64 * 32 * 4,
  });
  assert.equal(decodePartialsSize(64, 32, 128, 1), { partO: 4, partLse: 1 });
});

test("the decode grid refuses a split longer than its score buffer, naming the fix", () => {
  const p = {
    num_seqs: 1,
    num_q_heads: 32,
    num_kv_heads: 4,
    head_dim: 128,
    block_size: 16,
    max_blocks: 64,
    split_tokens: 1024,
    num_splits: 1,
    scale: 1,
  };
  assert.throws(
    () => decodeSpec.grid(p, f16, noGpu),
    /exceeds 4096 scores \(use planDecodeSplits\)/,
  );
  // [kv heads, splits, seqs]: the kv heads of a (split, seq) side by side
  assert.equal(decodeSpec.grid({ ...p, split_tokens: 512, num_splits: 2 }, f16, noGpu), [4, 2, 1]);
});

test("attention grids refuse head geometry they cannot hold", () => {
  const p = {
    num_seqs: 2,
    num_q_heads: 32,
    num_kv_heads: 4,
    head_dim: 128,
    block_size: 16,
    max_blocks: 8,
    max_query_len: 17,
    scale: 1,
  };
  const v = variantByName(prefillSpec, "f32");
  // 8 heads per kv head: 4 tokens x 8 heads = 32 rows a tile, 5 tiles for 17 tokens.
  assert.equal(prefillSpec.grid(p, v, noGpu), [5, 2, 4]);
  assert.throws(
    () => prefillSpec.grid({ ...p, head_dim: 256 }, v, noGpu),
    /head_dim 256 unsupported/,
  );
  assert.throws(() => prefillSpec.grid({ ...p, num_kv_heads: 5 }, v, noGpu), /not a multiple/);
  assert.throws(() => prefillSpec.grid({ ...p, head_dim: 8 }, v, noGpu), /head_dim 8/);
});

test("the model's tensor-core plan: half waves where their splits reach 256 keys and fill one, or stay under 128 where whole waves overflow one", () => {
  const tc = variantByName(decodeSpec, "f16-tcdw2h");
  const plan = (batch: number, ctx: number, split = {}) =>
    decodeStepSplits(Array(batch).fill(ctx), QWEN3_30B, tc, { minTokens: 64, ...split });
  // half waves: 24 splits of 352 keys (768 workgroups) at 8 x 8192, 3 of 2736 at 64 x 8192, 3 of
  // 352 at 64 x 1024
  assert.equal(plan(8, 8192), { splitTokens: 352, numSplits: 24 });
  assert.equal(plan(64, 8192), { splitTokens: 2736, numSplits: 3 });
  assert.equal(plan(64, 1024), { splitTokens: 352, numSplits: 3 });
  // whole waves where the half wave's splits are short (32 x 1024: 176 keys) or its workgroups
  // do not fill it (128 x 1024: one split of 1024 keys, 512 workgroups)
  assert.equal(plan(32, 1024), { splitTokens: 96, numSplits: 11 });
  assert.equal(plan(128, 1024), { splitTokens: 352, numSplits: 3 });
  assert.equal(plan(1, 8192), { splitTokens: 64, numSplits: 128 });
  assert.equal(plan(8, 1024), { splitTokens: 64, numSplits: 16 });
  // half waves of splits under 128 keys where the whole wave's 64-key splits overflow a half
  // wave (16 x 1024: 16 splits, 1,024 workgroups; 2 x 8192: 128, 1,024), not where its splits
  // would be longer (32 x 1024, 16 x 2048: 176 keys)
  assert.equal(plan(16, 1024), { splitTokens: 96, numSplits: 11 });
  assert.equal(plan(2, 8192), { splitTokens: 96, numSplits: 86 });
  assert.equal(plan(4, 4096), { splitTokens: 96, numSplits: 43 });
  assert.equal(plan(16, 2048), { splitTokens: 96, numSplits: 22 });
  assert.equal(plan(4, 1024), { splitTokens: 64, numSplits: 16 });
  // nor where the half wave is one split (many sequences of a short context: 128 x 100 keeps
  // two splits of 64 keys), nor where a wave is asked for
  assert.equal(plan(128, 100), { splitTokens: 64, numSplits: 2 });
  assert.equal(plan(16, 1024, { wave: 1536 }), { splitTokens: 64, numSplits: 16 });
  // the workgroups that count are those with keys: one long sequence among 63 short ones takes
  // whole waves, though its half-wave plan launches 768 workgroups
  const mixed = [8192, ...Array(63).fill(100)];
  const half = decodeStepSplits(mixed, QWEN3_30B, tc, { minTokens: 64, wave: 768 });
  assert.ok(64 * 4 * half.numSplits >= 768 && half.splitTokens >= 256);
  assert.equal(
    decodeStepSplits(mixed, QWEN3_30B, tc, { minTokens: 64 }),
    decodeStepSplits(mixed, QWEN3_30B, tc, { minTokens: 64, wave: 1536 }),
  );
  // an asked-for wave or workgroup count is taken as it is; the FMA forms aim at 2048 workgroups
  assert.equal(plan(8, 8192, { wave: 1536 }), { splitTokens: 176, numSplits: 47 });
  assert.equal(
    plan(8, 8192, { workgroups: 1024 }),
    planDecodeSplits(Array(8).fill(8192), QWEN3_30B, tc, 1024),
  );
  assert.equal(
    decodeStepSplits(Array(8).fill(8192), QWEN3_30B, f16, {}),
    planDecodeSplits(Array(8).fill(8192), QWEN3_30B, f16, 2048),
  );
});

test("the tiled forms' splits take at least 32 keys by default, the others 64", () => {
  const tiled = variantByName(decodeSpec, "f16-tiled");
  const tc = variantByName(decodeSpec, "f16-tcdw2h");
  assert.equal(decodeSplitMinTokens(tiled), 32);
  assert.equal(decodeSplitMinTokens(variantByName(decodeSpec, "f32-tiled")), 32);
  assert.equal(decodeSplitMinTokens(f16), 64);
  assert.equal(decodeSplitMinTokens(tc), 64);
  // batch-1 steps of a short context: 33 splits of 32 keys at 1 x 1025 (17 of 64 before), 16 at
  // 512
  const plan = (v: typeof tc, batch: number, ctx: number, split = {}) =>
    decodeStepSplits(Array(batch).fill(ctx), QWEN3_30B, v, split);
  assert.equal(plan(tiled, 1, 1025), { splitTokens: 32, numSplits: 33 });
  assert.equal(plan(tiled, 1, 512), { splitTokens: 32, numSplits: 16 });
  assert.equal(plan(tiled, 2, 1024), { splitTokens: 32, numSplits: 32 });
  // an asked-for floor applies to every form; the tensor-core forms keep 64 by default
  assert.equal(plan(tiled, 1, 1025, { minTokens: 64 }), { splitTokens: 64, numSplits: 17 });
  assert.equal(plan(tc, 1, 8192), { splitTokens: 64, numSplits: 128 });
  // larger steps: the ~2048 workgroups set the split, not the floor
  assert.equal(
    plan(tiled, 64, 1024),
    planDecodeSplits(Array(64).fill(1024), QWEN3_30B, tiled, 2048),
  );
});

test.run();
