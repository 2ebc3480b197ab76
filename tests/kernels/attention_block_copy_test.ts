import { test } from "uvu";
import * as assert from "uvu/assert";
import { createStorage, uploadBuffer } from "../../src/gpu/buffers.ts";
import { roundToF16InPlace } from "../../src/util/f16.ts";
import { Rng } from "../../src/util/rng.ts";
import { supportedVariants } from "../../kernels/kernel.ts";
import * as blockCopy from "../../kernels/kv_block_copy.ts";
import * as qkRope from "../../kernels/qk_norm_rope_cache.ts";
import * as decode from "../../kernels/paged_attention_decode.ts";
import * as prefill from "../../kernels/paged_attention.ts";
import { ropeTable } from "../../kernels/rope.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { dispatch, readF32, readT, uploadT } from "./attention_dispatch.ts";

// A parent sequence of 10 tokens in blocks [3, 1, 5] (block_size 4: block 5 holds 2 tokens).
// Its child forks the shared, partly filled tail: block 5 is copied to block 6 (and, in the
// same dispatch, block 0 to block 2), the child's table becomes [3, 1, 6].
//   before  parent [3 | 1 | 5: p8 p9 . .]     child = parent
//   after   parent [3 | 1 | 5: p8 p9 . .]     child [3 | 1 | 6: p8 p9 c10 .]
const SHAPE = { numQHeads: 4, numKvHeads: 2, headDim: 16, blockSize: 4 } as const;
const NUM_BLOCKS = 8;
const BLOCK = SHAPE.blockSize * SHAPE.numKvHeads * SHAPE.headDim;
const PARENT = Int32Array.from([3, 1, 5]);
const CHILD = Int32Array.from([3, 1, 6]);
const SCALE = 1 / Math.sqrt(SHAPE.headDim);

function block(cache: Float32Array, id: number): Float32Array {
  return cache.subarray(id * BLOCK, (id + 1) * BLOCK);
}

for (const variantName of ["f32", "f16"]) {
  test(`${variantName}: a forked block reads identically, and writing the fork leaves the parent's block alone`, async () => {
    const gpu = await sharedGpu();
    if (!supportedVariants(gpu, blockCopy.spec).some((v) => v.name === variantName)) return;
    const half = variantName === "f16";
    const device = gpu.device;
    const rng = Rng.fromSeed(`block copy ${variantName}`);
    const k0 = rng.fillNormal(new Float32Array(NUM_BLOCKS * BLOCK));
    const v0 = rng.fillNormal(new Float32Array(NUM_BLOCKS * BLOCK));
    if (half) [k0, v0].forEach(roundToF16InPlace);
    const kGpu = uploadT(gpu, "k_cache", k0, half);
    const vGpu = uploadT(gpu, "v_cache", v0, half);

    const pairs = blockCopy.packBlockCopies([[5, 6], [0, 2]], NUM_BLOCKS);
    await dispatch(gpu, blockCopy.spec, variantName, {
      num_pairs: 2,
      block_size: SHAPE.blockSize,
      num_kv_heads: SHAPE.numKvHeads,
      head_dim: SHAPE.headDim,
    }, { pairs: uploadBuffer(device, "pairs", pairs), k_cache: kGpu, v_cache: vGpu });
    const k1 = await readT(gpu, kGpu, k0.length, half);
    const v1 = await readT(gpu, vGpu, v0.length, half);
    for (let id = 0; id < NUM_BLOCKS; id++) {
      const from = id === 6 ? 5 : id === 2 ? 0 : id;
      assert.equal([...block(k1, id)], [...block(k0, from)], `K block ${id}`);
      assert.equal([...block(v1, id)], [...block(v0, from)], `V block ${id}`);
    }

    // The same query over parent and child tables: bit-identical attention.
    const q = rng.fillNormal(new Float32Array(2 * SHAPE.numQHeads * SHAPE.headDim));
    const seqs: prefill.AttentionSeq[] = [
      { queryStart: 0, queryLen: 1, contextLen: 10, blockTable: PARENT },
      { queryStart: 1, queryLen: 1, contextLen: 10, blockTable: CHILD },
    ];
    const out = createStorage(device, "out", q.length * 4);
    const { table, maxBlocks } = prefill.packBlockTables(seqs, SHAPE.blockSize);
    await dispatch(gpu, decode.spec, variantName, {
      num_seqs: 2,
      num_q_heads: SHAPE.numQHeads,
      num_kv_heads: SHAPE.numKvHeads,
      head_dim: SHAPE.headDim,
      block_size: SHAPE.blockSize,
      max_blocks: maxBlocks,
      split_tokens: 10,
      num_splits: 1,
      scale: SCALE,
    }, {
      q: uploadBuffer(
        device,
        "q",
        Float32Array.from([...q.subarray(0, q.length / 2), ...q.subarray(0, q.length / 2)]),
      ),
      k_cache: kGpu,
      v_cache: vGpu,
      block_tables: uploadBuffer(device, "block_tables", table),
      seq_info: uploadBuffer(device, "seq_info", prefill.packSeqInfo(seqs)),
      out,
      part_o: createStorage(device, "part_o", 16),
      part_lse: createStorage(device, "part_lse", 16),
    });
    const got = await readF32(gpu, out, q.length);
    const row = SHAPE.numQHeads * SHAPE.headDim;
    assert.equal(
      [...got.subarray(row)],
      [...got.subarray(0, row)],
      "child reads what the parent reads",
    );
    const want = prefill.pagedAttentionRef(q.subarray(0, row), k0, v0, [seqs[0]], SHAPE, SCALE, 1);
    for (let i = 0; i < row; i++) assert.ok(Math.abs(got[i] - want[i]) <= 1e-5, `out[${i}]`);

    // The child's next token lands in its own block 6, offset 2; block 5 keeps its bytes.
    const heads = SHAPE.numQHeads + 2 * SHAPE.numKvHeads;
    await dispatch(gpu, qkRope.spec, variantName, {
      tokens: 1,
      num_q_heads: SHAPE.numQHeads,
      num_kv_heads: SHAPE.numKvHeads,
      head_dim: SHAPE.headDim,
      max_positions: 16,
      qk_norm: 0,
      eps: 1e-6,
      splits: 1,
      split_stride: 0,
      q16: 0,
      q16_scale: 1,
    }, {
      qkv: uploadBuffer(device, "qkv", rng.fillNormal(new Float32Array(heads * SHAPE.headDim))),
      q_norm: uploadBuffer(device, "q_norm", new Float32Array(SHAPE.headDim)),
      k_norm: uploadBuffer(device, "k_norm", new Float32Array(SHAPE.headDim)),
      cos_sin: uploadBuffer(device, "cos_sin", ropeTable(16, SHAPE.headDim, 1e6)),
      positions: uploadBuffer(device, "positions", Int32Array.from([10])),
      slot_mapping: uploadBuffer(
        device,
        "slot_mapping",
        Int32Array.from([6 * SHAPE.blockSize + 2]),
      ),
      q_out: createStorage(device, "q_out", row * 4),
      k_cache: kGpu,
      v_cache: vGpu,
      q16: createStorage(device, "q16", 16),
    });
    const k2 = await readT(gpu, kGpu, k0.length, half);
    assert.equal([...block(k2, 5)], [...block(k0, 5)], "parent block 5 unchanged");
    const slot2 = 2 * SHAPE.numKvHeads * SHAPE.headDim;
    assert.equal(
      [...block(k2, 6).subarray(0, slot2)],
      [...block(k0, 5).subarray(0, slot2)],
      "the fork keeps the shared tokens",
    );
    assert.not.equal(
      [...block(k2, 6).subarray(slot2, slot2 + SHAPE.headDim)],
      [...block(k0, 5).subarray(slot2, slot2 + SHAPE.headDim)],
      "the fork holds the child's new token",
    );
  });
}

test("packBlockCopies refuses copies that would race or leave the cache", () => {
  assert.equal([...blockCopy.packBlockCopies([[1, 2], [1, 3]], 4)], [1, 2, 1, 3]);
  assert.throws(() => blockCopy.packBlockCopies([[1, 4]], 4), /block 4 outside \[0, 4\)/);
  assert.throws(() => blockCopy.packBlockCopies([[1, 1]], 4), /src = dst = 1/);
  assert.throws(
    () => blockCopy.packBlockCopies([[0, 2], [1, 2]], 4),
    /block 2 is a destination twice/,
  );
  assert.throws(
    () => blockCopy.packBlockCopies([[0, 1], [1, 2]], 4),
    /block 1 is both a source and a destination/,
  );
});

test.run();
