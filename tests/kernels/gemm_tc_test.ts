import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  gemmTcFits,
  gemmTcParams,
  gemmTcRowsPad,
  gemmTcSplitK,
  gemmTcSplits,
  spec,
} from "../../kernels/gemm_tc.ts";
import { castF16Params } from "../../kernels/cast_f16.ts";
import { variantByName } from "../../kernels/kernel.ts";
import { tensorCoreTileFor } from "../../src/model/gpu_model.ts";

test("the tensor-core GEMM pads rows to its tile and covers every column tile", () => {
  const tc16 = variantByName(spec, "f16-tc16"), tc64 = variantByName(spec, "f16-tc64");
  assert.is(gemmTcRowsPad(1, tc16), 16);
  assert.is(gemmTcRowsPad(64, tc16), 64);
  assert.is(gemmTcRowsPad(65, tc64), 128);
  assert.is(gemmTcRowsPad(0, tc64), 0);
  // n = 80: two column tiles of 64 (the second clamped), m = 37: one 64-row block
  const grid = spec.grid(gemmTcParams(37, 80, 48, false), tc64, undefined as never);
  assert.equal(grid, [2, 1, 1]);
  assert.equal(spec.grid(gemmTcParams(37, 80, 48, true), tc16, undefined as never), [2, 3, 1]);
});

test("shapes the tensor cores cannot take are refused by field", () => {
  assert.ok(gemmTcFits(5120, 2048));
  assert.not.ok(gemmTcFits(5120, 100));
  assert.not.ok(gemmTcFits(8, 16));
  assert.throws(
    () => gemmTcParams(4, 24, 32, false),
    /n = 24 and k = 32 must be positive multiples of 16/,
  );
  assert.throws(() => castF16Params(4, 2, 16), /rows_pad = 2 must be an integer >= rows = 4/);
  assert.throws(() => castF16Params(4, 16, 6), /width = 6 must be a positive multiple of 4/);
});

test("split-K adds k splits until the workgroups reach the target, keeping 8 slices a split", () => {
  const tc16 = variantByName(spec, "f16-tc16"), tc64 = variantByName(spec, "f16-tc64");
  // qkv at 64 decode rows: 80 x 4 tiles -> 8 splits of 256
  assert.is(gemmTcSplits(64, 5120, 2048, tc16, 2048), 8);
  assert.is(gemmTcSplitK(2048, 8), 256);
  // o: 32 x 4 tiles, k 4096 -> 16 splits
  assert.is(gemmTcSplits(64, 2048, 4096, tc16, 2048), 16);
  // a prefill's tiles are enough
  assert.is(gemmTcSplits(2048, 5120, 2048, tc64, 2048), 1);
  // k 256: 16 slices, two splits of 8 at most
  assert.is(gemmTcSplits(16, 64, 256, tc16, 2048), 2);
  // the split k stays a multiple of 16; the last split may be short
  assert.is(gemmTcSplitK(112, 3), 48);
  const p = gemmTcParams(19, 96, 112, false, 3);
  assert.equal(spec.grid(p, tc16, undefined as never), [2, 2, 3]);
  assert.throws(() => gemmTcParams(19, 96, 112, true, 3), /split-K writes partial sums/);
});

test("the row tile grows with the rows: many workgroups for decode, reuse for prefill", () => {
  assert.is(tensorCoreTileFor(1), 16);
  assert.is(tensorCoreTileFor(64), 16);
  assert.is(tensorCoreTileFor(65), 32);
  assert.is(tensorCoreTileFor(256), 32);
  assert.is(tensorCoreTileFor(2048), 64);
});

test.run();
