import { test } from "uvu";
import * as assert from "uvu/assert";
import { createStorage, uploadBuffer } from "../../src/gpu/buffers.ts";
import { roundToF16InPlace } from "../../src/util/f16.ts";
import { Rng } from "../../src/util/rng.ts";
import { supportedVariants, variantByName } from "../../kernels/kernel.ts";
import * as qkRope from "../../kernels/qk_norm_rope_cache.ts";
import * as prefill from "../../kernels/paged_attention.ts";
import * as decode from "../../kernels/paged_attention_decode.ts";
import * as reduce from "../../kernels/paged_attention_decode_reduce.ts";
import { ropeTable } from "../../kernels/rope.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { dispatch, maxAbsDiff, readF32, readT, uploadT } from "./attention_dispatch.ts";

// Two sequences over a 16-block cache (block_size 4), 4 query heads sharing 2 kv heads:
//   step 1  A prefills positions 0..5 (chunk 1 of its 11-token prompt)
//   step 2  A prefills 6..10 (chunk 2, after a prefix that ends mid-block) while B prefills
//           0..4, plus one padding token (slot -1)
//   step 3+ both decode one token a step (A at 11.., B at 5..)
// A's blocks [9, 2, 14, 5], B's [7, 0, 11].
const SHAPE = { numQHeads: 4, numKvHeads: 2, headDim: 32, blockSize: 4 } as const;
const NUM_BLOCKS = 16;
const MAX_POS = 64;
const EPS = 1e-6;
const HEADS = SHAPE.numQHeads + 2 * SHAPE.numKvHeads;
const CACHE = NUM_BLOCKS * SHAPE.blockSize * SHAPE.numKvHeads * SHAPE.headDim;
const TABLES = [Int32Array.from([9, 2, 14, 5]), Int32Array.from([7, 0, 11])];
const SCALE = 1 / Math.sqrt(SHAPE.headDim);

/** (sequence, first position, new tokens) per step; -1 = one padding token. */
const STEPS: readonly (readonly [number, number, number])[][] = [
  [[0, 0, 6]],
  [[0, 6, 5], [1, 0, 5], [-1, 0, 1]],
  [[0, 11, 1], [1, 5, 1]],
  [[0, 12, 1], [1, 6, 1]],
  [[0, 13, 1], [1, 7, 1]],
  [[0, 14, 1], [1, 8, 1]],
];

function slotOf(seq: number, pos: number): number {
  return TABLES[seq][Math.floor(pos / SHAPE.blockSize)] * SHAPE.blockSize + (pos % SHAPE.blockSize);
}

for (const variantName of ["f32", "f16"]) {
  test(`${variantName}: chunked prefill then split-K decode steps match the CPU reference over the whole sequence`, async () => {
    const gpu = await sharedGpu();
    if (!supportedVariants(gpu, decode.spec).some((v) => v.name === variantName)) return;
    const half = variantName === "f16";
    const device = gpu.device;
    const rng = Rng.fromSeed(`attention sequence ${variantName}`);
    const table = ropeTable(MAX_POS, SHAPE.headDim, 1e6);
    const qNorm = rng.fillUniform(new Float32Array(SHAPE.headDim), 0.5, 1.5);
    const kNorm = rng.fillUniform(new Float32Array(SHAPE.headDim), 0.5, 1.5);
    if (half) [qNorm, kNorm].forEach(roundToF16InPlace);
    // The caches start as noise: attention must read only what the steps wrote.
    let kCpu = rng.fillNormal(new Float32Array(CACHE)),
      vCpu = rng.fillNormal(new Float32Array(CACHE));
    if (half) [kCpu, vCpu].forEach(roundToF16InPlace);
    const kGpu = uploadT(gpu, "k_cache", kCpu, half);
    const vGpu = uploadT(gpu, "v_cache", vCpu, half);
    const common = {
      qNormGpu: uploadT(gpu, "q_norm", qNorm, half),
      kNormGpu: uploadT(gpu, "k_norm", kNorm, half),
      tableGpu: uploadBuffer(device, "cos_sin", table),
    };
    const tol = half ? 5e-4 : 1e-5;
    const qA: Float32Array[] = [], outA: Float32Array[] = [];

    for (const [stepIndex, step] of STEPS.entries()) {
      const positions: number[] = [], slots: number[] = [];
      const seqs: prefill.AttentionSeq[] = [];
      for (const [seq, first, count] of step) {
        if (seq >= 0) {
          seqs.push({
            queryStart: positions.length,
            queryLen: count,
            contextLen: first + count,
            blockTable: TABLES[seq],
          });
        }
        for (let i = 0; i < count; i++) {
          positions.push(seq >= 0 ? first + i : 0);
          slots.push(seq >= 0 ? slotOf(seq, first + i) : -1);
        }
      }
      const tokens = positions.length;
      const qkv = rng.fillNormal(new Float32Array(tokens * HEADS * SHAPE.headDim), 2);
      const pos = Int32Array.from(positions), slotMapping = Int32Array.from(slots);

      // q/k norm + RoPE + cache write, GPU and CPU.
      const qGpu = createStorage(device, "q", tokens * SHAPE.numQHeads * SHAPE.headDim * 4);
      await dispatch(gpu, qkRope.spec, variantName, {
        tokens,
        num_q_heads: SHAPE.numQHeads,
        num_kv_heads: SHAPE.numKvHeads,
        head_dim: SHAPE.headDim,
        max_positions: MAX_POS,
        qk_norm: 1,
        eps: EPS,
        splits: 1,
        split_stride: 0,
        q16: 0,
        q16_scale: 1,
      }, {
        qkv: uploadBuffer(device, "qkv", qkv),
        q_norm: common.qNormGpu,
        k_norm: common.kNormGpu,
        cos_sin: common.tableGpu,
        positions: uploadBuffer(device, "positions", pos),
        slot_mapping: uploadBuffer(device, "slot_mapping", slotMapping),
        q_out: qGpu,
        k_cache: kGpu,
        v_cache: vGpu,
        q16: createStorage(device, "q16", 16),
      });
      const ref = qkRope.qkNormRopeCacheRef(
        qkv,
        qNorm,
        kNorm,
        table,
        pos,
        slotMapping,
        kCpu,
        vCpu,
        SHAPE,
        EPS,
      );
      kCpu = ref.kCache;
      vCpu = ref.vCache;
      if (half) [kCpu, vCpu].forEach(roundToF16InPlace);
      const qRef = ref.q;

      // Attention: the prefill kernel on every step, the split-K decode on decode steps.
      const { table: blockTables, maxBlocks } = prefill.packBlockTables(seqs, SHAPE.blockSize);
      const seqInfo = prefill.packSeqInfo(seqs);
      const meta = {
        block_tables: uploadBuffer(device, "block_tables", blockTables),
        seq_info: uploadBuffer(device, "seq_info", seqInfo),
      };
      const common2 = {
        num_seqs: seqs.length,
        num_q_heads: SHAPE.numQHeads,
        num_kv_heads: SHAPE.numKvHeads,
        head_dim: SHAPE.headDim,
        block_size: SHAPE.blockSize,
        max_blocks: maxBlocks,
        scale: SCALE,
      };
      const outElems = tokens * SHAPE.numQHeads * SHAPE.headDim;
      const outGpu = createStorage(device, "out", outElems * 4);
      await dispatch(gpu, prefill.spec, variantName, {
        ...common2,
        max_query_len: prefill.maxQueryLen(seqs),
      }, { q: qGpu, k_cache: kGpu, v_cache: vGpu, ...meta, out: outGpu });
      const want = prefill.pagedAttentionRef(qRef, kCpu, vCpu, seqs, SHAPE, SCALE, tokens);
      const seqRows = seqs.reduce((a, s) => a + s.queryLen, 0) * SHAPE.numQHeads * SHAPE.headDim;
      const got = await readF32(gpu, outGpu, outElems);
      const err = maxAbsDiff(got.subarray(0, seqRows), want.subarray(0, seqRows));
      assert.ok(err <= tol, `step ${stepIndex + 1} paged_attention: max |gpu - ref| = ${err}`);

      if (seqs.every((s) => s.queryLen === 1)) {
        const variant = variantByName(decode.spec, variantName);
        const plan = decode.planDecodeSplits(seqs.map((s) => s.contextLen), SHAPE, variant, 64, 4);
        assert.ok(plan.numSplits > 1, "the decode steps are meant to exercise the merge");
        const part = decode.decodePartialsSize(
          seqs.length,
          SHAPE.numQHeads,
          SHAPE.headDim,
          plan.numSplits,
        );
        const partO = createStorage(device, "part_o", part.partO * 4);
        const partLse = createStorage(device, "part_lse", part.partLse * 4);
        const decOut = createStorage(device, "decode out", outElems * 4);
        // the merge's out16, not written (write_f16 0): WebGPU forbids binding decOut twice
        const placeholder = createStorage(device, "placeholder", 16);
        await dispatch(gpu, decode.spec, variantName, {
          ...common2,
          split_tokens: plan.splitTokens,
          num_splits: plan.numSplits,
        }, {
          q: qGpu,
          k_cache: kGpu,
          v_cache: vGpu,
          ...meta,
          out: decOut,
          part_o: partO,
          part_lse: partLse,
        });
        await dispatch(gpu, reduce.spec, "f32", {
          num_seqs: seqs.length,
          num_q_heads: SHAPE.numQHeads,
          head_dim: SHAPE.headDim,
          split_tokens: plan.splitTokens,
          num_splits: plan.numSplits,
          write_f16: 0,
        }, {
          seq_info: meta.seq_info,
          part_o: partO,
          part_lse: partLse,
          out: decOut,
          out16: placeholder,
        });
        const dec = await readF32(gpu, decOut, outElems);
        const decErr = maxAbsDiff(dec, want);
        assert.ok(decErr <= tol, `step ${stepIndex + 1} decode: max |gpu - ref| = ${decErr}`);
        const agree = maxAbsDiff(dec, got);
        assert.ok(
          agree <= 1e-5,
          `step ${stepIndex + 1}: decode and prefill kernels differ by ${agree}`,
        );
      }
      const a = seqs.find((s) => s.blockTable === TABLES[0]);
      if (a) {
        const row = SHAPE.numQHeads * SHAPE.headDim;
        const qAll = await readF32(gpu, qGpu, tokens * row);
        qA.push(qAll.slice(a.queryStart * row, (a.queryStart + a.queryLen) * row));
        outA.push(got.slice(a.queryStart * row, (a.queryStart + a.queryLen) * row));
      }
    }

    // The caches hold exactly what the CPU wrote (and the noise where nothing was written).
    const kBack = await readT(gpu, kGpu, CACHE, half);
    const vBack = await readT(gpu, vGpu, CACHE, half);
    const cacheTol = half ? 4e-3 : 1e-5;
    assert.ok(maxAbsDiff(vBack, vCpu) === 0, "V cache differs from the reference");
    assert.ok(maxAbsDiff(kBack, kCpu) <= cacheTol, `K cache differs by ${maxAbsDiff(kBack, kCpu)}`);

    // One prefill of A's 15 tokens over the final cache equals the step-by-step outputs.
    const qWhole = Float32Array.from(qA.flatMap((x) => [...x]));
    const stepwise = Float32Array.from(outA.flatMap((x) => [...x]));
    const whole: prefill.AttentionSeq = {
      queryStart: 0,
      queryLen: 15,
      contextLen: 15,
      blockTable: TABLES[0],
    };
    const { table: bt, maxBlocks } = prefill.packBlockTables([whole], SHAPE.blockSize);
    const outWhole = createStorage(device, "out whole", qWhole.length * 4);
    await dispatch(gpu, prefill.spec, variantName, {
      num_seqs: 1,
      num_q_heads: SHAPE.numQHeads,
      num_kv_heads: SHAPE.numKvHeads,
      head_dim: SHAPE.headDim,
      block_size: SHAPE.blockSize,
      max_blocks: maxBlocks,
      max_query_len: 15,
      scale: SCALE,
    }, {
      q: uploadBuffer(device, "q whole", qWhole),
      k_cache: kGpu,
      v_cache: vGpu,
      block_tables: uploadBuffer(device, "bt", bt),
      seq_info: uploadBuffer(device, "seq_info", prefill.packSeqInfo([whole])),
      out: outWhole,
    });
    const wholeOut = await readF32(gpu, outWhole, qWhole.length);
    const diff = maxAbsDiff(wholeOut, stepwise);
    assert.ok(diff <= 1e-5, `one long prefill differs from chunks + decode by ${diff}`);
  });
}

test.run();
