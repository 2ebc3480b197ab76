import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import {
  a32Twin,
  GEMM_TC_A32,
  GEMM_TCP_VARIANTS,
  GEMM_TCS_VARIANTS,
  GEMM_TCS_WIDE_VARIANTS,
  gemmTcFits,
  gemmTcKStep,
  gemmTcParams,
  gemmTcRowsPad,
  gemmTcSplitK,
  gemmTcSplits,
  isPrefillForm,
  spec,
  stagedSplitMinK,
} from "../../kernels/gemm_tc.ts";
import { storesT } from "../../kernels/case_inputs.ts";
import * as gemmTcKernel from "../../kernels/gemm_tc.ts";
import { castF16Params } from "../../kernels/cast_f16.ts";
import { preludeOf, variantByName } from "../../kernels/kernel.ts";
import {
  decodeSplits,
  LM_HEAD_FORMS,
  lmHeadFormFor,
  prefillSplits,
  TC_TCP_DECODE_WAVE,
  tensorCoreTileFor,
  tensorCoreVariantFor,
} from "../../src/model/gpu_model.ts";

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

test("the staged forms take 32 columns and TM rows a workgroup, reading 16-byte words", () => {
  const tcs16 = variantByName(spec, "f16-tcs16"), tcs64 = variantByName(spec, "f16-tcs64");
  assert.is(gemmTcKStep(tcs16), 64);
  assert.is(gemmTcKStep(variantByName(spec, "f16-tc16")), 16);
  // qkv at 64 rows: one row block, 160 column blocks of 32, 4 splits of 512
  const p = gemmTcParams(64, 5120, 2048, false, 4, 64);
  assert.is(p.k_split, 512);
  assert.equal(spec.grid(p, tcs64, undefined as never), [1, 160, 4]);
  // 100 rows: two row blocks of 64 (the second partial), n 48: two column blocks
  assert.equal(spec.grid(gemmTcParams(100, 48, 256, true), tcs64, undefined as never), [2, 2, 1]);
  // (row blocks along x)
  assert.equal(spec.grid(gemmTcParams(33, 48, 256, true), tcs16, undefined as never), [3, 2, 1]);
  assert.is(gemmTcRowsPad(9, tcs16), 16);
  assert.is(gemmTcRowsPad(65, tcs64), 128);
  // their split k is a multiple of 64 (3 splits of 192: 64 each), and k must be one
  assert.is(gemmTcSplitK(192, 3, 64), 64);
  assert.is(gemmTcSplitK(2048, 3, 64), 704);
  assert.throws(() => gemmTcParams(4, 32, 48, false, 1, 64), /k = 48 must be a multiple of .* 64/);
  // at least 32 slices (512 of k, the model's default) a split: qkv 4, o 8
  assert.is(gemmTcSplits(64, 5120, 2048, tcs64, 2048, 16, 32), 4);
  assert.is(gemmTcSplits(64, 2048, 4096, tcs64, 2048, 16, 32), 8);
  // a and b are read as vec4<u32>, declared read_write (the H200 driver reads them faster so);
  // c stays f32; one workgroup struct in the shader
  const prelude = preludeOf(spec, tcs64);
  assert.match(prelude, /var<storage, read_write> a: array<vec4<u32>>;/);
  assert.match(prelude, /var<storage, read_write> b: array<vec4<u32>>;/);
  assert.match(prelude, /var<storage, read_write> c: array<f32>;/);
  const wgsl = readFileSync(new URL("../../shaders/gemm_tcs.wgsl", import.meta.url), "utf8");
  assert.equal([...wgsl.matchAll(/var<workgroup> (\w+)/g)].map((m) => m[1]), ["wg"]);
  // RT is 1, 2 or 4 in gemm_tcs (its branches take row tiles 2 and 3 together), 2, 4 or 8
  // subgroups in gemm_tcs_sg
  assert.equal(
    GEMM_TCS_VARIANTS.map((n) => variantByName(spec, n).consts?.RT),
    [1, 2, 4, 2, 4, 8],
  );
});

test("the -a32 twins read a as f32 words and keep their form's tiles and splits", () => {
  for (const name of GEMM_TC_A32) {
    const base = variantByName(spec, name);
    const twin = variantByName(spec, a32Twin(name)!);
    assert.equal(twin.consts, { ...base.consts, A32: 1 });
    assert.equal(twin.f32Inputs, ["a"]);
    assert.is(twin.shader, base.shader);
    assert.is(isPrefillForm(twin), isPrefillForm(base));
    assert.is(stagedSplitMinK(twin), stagedSplitMinK(base));
    // a declared as f32 vec4s, b still 16-byte words of f16, both read_write as the form's
    const prelude = preludeOf(spec, twin);
    assert.equal(twin.readWrite, base.readWrite);
    assert.match(prelude, /var<storage, read_write> a: array<vec4<f32>>;/);
    assert.match(prelude, /var<storage, read_write> b: array<vec4<u32>>;/);
    assert.match(prelude, /const A32: u32 = 1u;/);
    // validation uploads a as f32 for the twin and as f16 for the form
    const a = spec.bindings.find((b) => b.name === "a")!;
    assert.is(storesT(a, twin), false);
    assert.is(storesT(a, base), true);
  }
  assert.is(a32Twin("f16-tcp256x128"), null);
  assert.is(a32Twin("f16-tcp128x128"), null);
  assert.is(a32Twin("f16-tc16"), null);
  // a binding that is not a read-only T binding of a wide-words form cannot be read as f32
  const bad = { ...variantByName(spec, "f16-tcs16"), f32Inputs: ["c"] };
  assert.throws(() => preludeOf(spec, bad), /f32Inputs names 'c'/);
});

test("the several-subgroup staged forms: one subgroup a row tile, per-subgroup matrix offsets", () => {
  for (const [name, rt] of [["f16-tcs32x2", 2], ["f16-tcs64x4", 4], ["f16-tcs128x8", 8]] as const) {
    const v = variantByName(spec, name);
    assert.is(v.shader, "gemm_tcs_sg.wgsl");
    assert.equal(v.consts, { RT: rt, TM: 16 * rt, CS: 1, CW: 32, A32: 0 });
    assert.ok(v.perSubgroupMatrices && v.wideWords);
    assert.is(gemmTcKStep(v), 64);
    // Tint's uniformity check of the matrix offsets is off for these alone
    const prelude = preludeOf(spec, v);
    assert.match(
      prelude,
      /enable chromium_experimental_subgroup_matrix;\ndiagnostic\(off, chromium\.subgroup_matrix_uniformity\);/,
    );
  }
  assert.not.match(preludeOf(spec, variantByName(spec, "f16-tcs64")), /diagnostic/);
  // qkv at 64 rows: one row block of 64, 160 column blocks, 4 splits; 128 rows of o: one block
  const p = gemmTcParams(64, 5120, 2048, false, 4, 64);
  assert.equal(spec.grid(p, variantByName(spec, "f16-tcs64x4"), undefined as never), [1, 160, 4]);
  const o = gemmTcParams(128, 2048, 4096, false, 8, 64);
  assert.equal(spec.grid(o, variantByName(spec, "f16-tcs128x8"), undefined as never), [1, 64, 8]);
  assert.is(gemmTcRowsPad(65, variantByName(spec, "f16-tcs128x8")), 128);
  const wgsl = readFileSync(new URL("../../shaders/gemm_tcs_sg.wgsl", import.meta.url), "utf8");
  assert.equal([...wgsl.matchAll(/var<workgroup> (\w+)/g)].map((m) => m[1]), ["wg"]);
  assert.match(wgsl, /@compute @workgroup_size\(THREADS\)/);
});

test("the forms with column groups: rt row tiles by cs groups of 32 columns, CW columns a block", () => {
  const forms = GEMM_TCS_WIDE_VARIANTS.map((n) => variantByName(spec, n));
  for (const v of forms) {
    const [, tm, rt, cw] = /^f16-tcs(\d+)x(\d+)w(\d+)$/.exec(v.name)!.map(Number);
    assert.equal(v.consts, { RT: rt, TM: tm, CS: cw / 32, CW: cw, A32: 0 }, v.name);
    assert.is(v.shader, "gemm_tcs_sg.wgsl");
    assert.ok(v.perSubgroupMatrices && v.wideWords);
    assert.is(gemmTcKStep(v), 64);
    // at most 1024 invocations and lavapipe-free workgroup memory under the H200's 48 KB:
    // CW weight rows, TM rows of a (72 f16 each) and a 16 x 32 f32 tile
    assert.ok(32 * rt * (cw / 32) <= 1024, v.name);
    assert.ok((cw + tm) * 72 * 2 + 16 * 32 * 4 <= 49152, v.name);
  }
  // the LM head at 8 rows: one row block, 151936 / 128 column blocks; 64 rows of a 16-row form
  // are 4 row blocks side by side
  const p = gemmTcParams(8, 151936, 2048, false, 1, 64);
  assert.equal(spec.grid(p, variantByName(spec, "f16-tcs16x1w128"), undefined as never), [
    1,
    1187,
    1,
  ]);
  const p64 = gemmTcParams(64, 151936, 2048, false, 1, 64);
  assert.equal(spec.grid(p64, variantByName(spec, "f16-tcs16x1w256"), undefined as never), [
    4,
    594,
    1,
  ]);
  // validate runs them on every case whose k steps by 64, among them n cutting a block's
  // first column group (400)
  const cut = gemmTcKernel.cases.find((c) => c.label === "m=8 n=400 k=256")!;
  for (const v of forms) assert.ok(!cut.variants || cut.variants.includes(v.name), v.name);
});

test("validate compares the staged forms only on shapes whose k and splits step by 64", () => {
  for (const c of gemmTcKernel.cases) {
    if (c.label.endsWith("f32 a, outliers")) {
      // the twins' own cases: f32 activations past f16's range, the twins alone
      assert.equal(c.variants, GEMM_TC_A32.map((n) => `${n}-a32`), c.label);
      continue;
    }
    // each form on the cases whose k and k_split are multiples of its k step: 16 or 32 for
    // the prefill forms, 64 for the staged ones and their -a32 twins
    const by = (step: number) => c.params.k % step === 0 && c.params.k_split % step === 0;
    const fits = spec.variants.filter((v) => by(gemmTcKStep(v))).map((v) => v.name);
    assert.equal(c.variants, fits.length === spec.variants.length ? undefined : fits, c.label);
    const staged = by(64);
    assert.is(fits.includes("f16-tcs16"), staged, c.label);
    assert.is(fits.includes("f16-tcs128x8-a32"), staged, c.label);
  }
  assert.equal(
    GEMM_TCP_VARIANTS.map((n) => gemmTcKStep(variantByName(spec, n))),
    [16, 16, 16, 32, 16, 16, 16],
  );
  // the staged forms' own shapes are there: partial row tiles, a half column block, splits
  const labels = gemmTcKernel.cases.filter((c) =>
    !c.variants?.length || c.variants.includes("f16-tcs16")
  )
    .map((c) => c.label);
  assert.ok(labels.includes("m=37 n=144 k=192 split 3"), labels.join(", "));
  assert.ok(labels.includes("m=9 n=80 k=128"), labels.join(", "));
});

test("the LM head takes the first of its forms whose rows cover the step's, where it compiled", () => {
  const all = new Set(spec.variants.map((v) => v.name));
  assert.equal(
    [2, 8, 16, 17, 32, 33, 64, 65, 128, 129, 2048].map((r) => lmHeadFormFor(LM_HEAD_FORMS, r, all)),
    [
      "f16-tcs16x1w128",
      "f16-tcs16x1w128",
      "f16-tcs16x1w128",
      "f16-tcs32x2w64",
      "f16-tcs32x2w64",
      "f16-tcs64x4w128",
      "f16-tcs64x4w128",
      "f16-tcp128x256",
      "f16-tcp128x256",
      null,
      null,
    ],
  );
  // every default form is a gemm_tc form; one that did not compile, or no table, leaves the
  // rows to the linears' choice
  for (const f of LM_HEAD_FORMS) assert.ok(all.has(f.variant), f.variant);
  const without = new Set([...all].filter((n) => n !== "f16-tcs32x2w64"));
  assert.is(lmHeadFormFor(LM_HEAD_FORMS, 32, without), null);
  assert.is(lmHeadFormFor([], 8, all), null);
});

test("linear layers take the staged forms up to the decode rows where k steps by 64", () => {
  const on = { decodeRows: 128, tile: 0 as const };
  assert.equal(
    [9, 16, 17, 32, 33, 64, 128, 129, 2048].map((r) => tensorCoreVariantFor(r, 2048, on)),
    [
      "f16-tcs16",
      "f16-tcs16",
      "f16-tcs32",
      "f16-tcs32",
      "f16-tcs16",
      "f16-tcs16",
      "f16-tcs16",
      "f16-tc32",
      "f16-tc64",
    ],
  );
  // k not a multiple of 64, or the staged forms off: gemm_tc's tiles (or the tile asked for)
  assert.is(tensorCoreVariantFor(64, 2064, on), "f16-tc16");
  assert.is(tensorCoreVariantFor(64, 2048, { decodeRows: 0, tile: 0 }), "f16-tc16");
  assert.is(tensorCoreVariantFor(64, 2048, { decodeRows: 0, tile: 64 }), "f16-tc64");
  // a tile asked for holds for the staged forms too
  assert.is(tensorCoreVariantFor(64, 2048, { decodeRows: 128, tile: 16 }), "f16-tcs16");
  assert.is(tensorCoreVariantFor(64, 2048, { decodeRows: 32, tile: 0 }), "f16-tc16");
  // one subgroup a row tile: tcs32x2 up to 32 rows, then tcs64x4 (in row blocks past 64)
  const rowsForm = { decodeRows: 128, tile: 0 as const, subgroups: "rows" as const };
  assert.equal(
    [9, 16, 17, 32, 33, 64, 65, 128, 129].map((r) => tensorCoreVariantFor(r, 2048, rowsForm)),
    [
      "f16-tcs16",
      "f16-tcs16",
      "f16-tcs32x2",
      "f16-tcs32x2",
      "f16-tcs64x4",
      "f16-tcs64x4",
      "f16-tcs64x4",
      "f16-tcs64x4",
      "f16-tc32",
    ],
  );
  assert.is(tensorCoreVariantFor(64, 2048, { ...rowsForm, tile: 16 }), "f16-tcs16");
  // forms that did not compile here give way: several subgroups -> one -> gemm_tc's tiles
  const without = (...names: string[]) =>
    new Set(GEMM_TCS_VARIANTS.filter((n) => !names.includes(n)));
  assert.is(
    tensorCoreVariantFor(64, 2048, { ...rowsForm, compiled: without("f16-tcs64x4") }),
    "f16-tcs16",
  );
  assert.is(
    tensorCoreVariantFor(64, 2048, {
      ...rowsForm,
      compiled: without("f16-tcs64x4", "f16-tcs16"),
    }),
    "f16-tc16",
  );
  assert.is(tensorCoreVariantFor(24, 2048, { ...rowsForm, compiled: new Set() }), "f16-tc16");
  assert.is(
    tensorCoreVariantFor(24, 2048, { ...rowsForm, compiled: without("f16-tcs32x2") }),
    "f16-tcs32",
  );
});

test("a prefill form takes the rows past the staged forms' where k steps by 32 and it compiled", () => {
  const opts = {
    decodeRows: 128,
    tile: 0 as const,
    subgroups: "rows" as const,
    prefill: "tcp128x128" as const,
  };
  assert.equal(
    [64, 128, 129, 2048].map((r) => tensorCoreVariantFor(r, 2048, opts)),
    ["f16-tcs64x4", "f16-tcs64x4", "f16-tcp128x128", "f16-tcp128x128"],
  );
  // k not a multiple of 32, a tile asked for, "tc", or not compiled: gemm_tc's tiles
  assert.is(tensorCoreVariantFor(2048, 2064, opts), "f16-tc64");
  assert.is(tensorCoreVariantFor(2048, 2048, { ...opts, tile: 32 }), "f16-tc32");
  assert.is(tensorCoreVariantFor(2048, 2048, { ...opts, prefill: "tc" }), "f16-tc64");
  assert.is(
    tensorCoreVariantFor(2048, 2048, { ...opts, compiled: new Set(GEMM_TCS_VARIANTS) }),
    "f16-tc64",
  );
  // the prefill forms' workgroups: rows x columns, row blocks on x
  const tcp = variantByName(spec, "f16-tcp128x64");
  assert.equal(spec.grid(gemmTcParams(2000, 2048, 2048, false), tcp, undefined as never), [
    16,
    32,
    1,
  ]);
  assert.is(gemmTcRowsPad(2000, tcp), 2048);
  assert.match(preludeOf(spec, tcp), /diagnostic\(off, chromium.subgroup_matrix_uniformity\)/);
});

test("decode-sized linears: the staged forms aim at 2048 workgroups (splits as long as their row blocks), the prefill forms fill one wave", () => {
  const tcp = variantByName(spec, "f16-tcp128x128");
  const tcs = variantByName(spec, "f16-tcs64x4");
  // Qwen3-30B-A3B at 128 rows on tcp128x128 (132 workgroups a wave): qkv 40 tiles -> 3 splits
  // (120 workgroups, k splits of 704), o 16 tiles -> 8
  assert.is(TC_TCP_DECODE_WAVE, 132);
  assert.is(decodeSplits(128, 5120, 2048, tcp), 3);
  assert.is(gemmTcSplitK(2048, 3, gemmTcKStep(tcp)), 704);
  assert.is(decodeSplits(128, 2048, 4096, tcp), 8);
  // a smaller target asked for still holds
  assert.is(decodeSplits(128, 2048, 4096, tcp, 32), 2);
  // one tile: 16 splits would leave k splits of 128, under the prefill forms' 256; 9 of 256
  // would leave the ninth empty: 8
  assert.is(decodeSplits(128, 128, 2048, tcp), 8);
  assert.is(decodeSplits(128, 128, 2048, tcp, 2048, 1024), 2);
  // at 64 rows on tcs64x4: as many splits as splits of at least 1024 of k allow
  assert.is(decodeSplits(64, 5120, 2048, tcs), 2);
  assert.is(decodeSplits(64, 2048, 4096, tcs), 4);
  // past them, in two row blocks: splits of at least 2048 (qkv unsplit, o in 2); a minimum
  // asked for is taken as given
  assert.is(decodeSplits(72, 5120, 2048, tcs), 1);
  assert.is(decodeSplits(128, 5120, 2048, tcs), 1);
  assert.is(decodeSplits(128, 2048, 4096, tcs), 2);
  assert.is(decodeSplits(128, 2048, 4096, tcs, 2048, 1024), 4);
  // tcs128x8 holds 128 rows in one block
  assert.is(decodeSplits(128, 2048, 4096, variantByName(spec, "f16-tcs128x8")), 4);
});

test("prefill-sized linears split k only where their tiles leave the GPU idle", () => {
  const tcp = variantByName(spec, "f16-tcp128x128");
  const capacity = 16 * 128 * 5120; // the partials buffer of synthetic:qwen3-30b-a3b
  // the router (128 columns) at 2048 rows: 16 tiles -> 8 splits of 256 (128 workgroups)
  assert.is(prefillSplits(2048, 128, 2048, tcp, capacity), 8);
  assert.is(gemmTcSplitK(2048, 8, gemmTcKStep(tcp)), 256);
  // qkv and o at 2048 rows, and the router at 16384: enough tiles, no split
  assert.is(prefillSplits(2048, 5120, 2048, tcp, capacity), 1);
  assert.is(prefillSplits(2048, 2048, 4096, tcp, capacity), 1);
  assert.is(prefillSplits(16384, 128, 2048, tcp, capacity), 1);
  // splits of at least 256 of k: k 512 gives 2 at most
  assert.is(prefillSplits(2048, 128, 512, tcp, capacity), 2);
  // halved until the partial sums fit the buffer
  assert.is(prefillSplits(2048, 128, 2048, tcp, 4 * 2048 * 128), 4);
  assert.is(prefillSplits(2048, 128, 2048, tcp, 2048 * 128), 1);
});

test("the prefill forms split decode-sized steps in splits of at least 256 of k", () => {
  const tcp = variantByName(spec, "f16-tcp128x128");
  assert.is(gemmTcKernel.stagedSplitMinK(tcp), 256);
  assert.is(gemmTcKernel.stagedSplitMinK(variantByName(spec, "f16-tcs64x4")), 1024);
  assert.is(gemmTcKernel.stagedSplitMinK(variantByName(spec, "f16-tcs16")), 512);
  // qkv at 128 rows: 40 tiles -> 8 splits of 256 (320 workgroups); o (k 4096): 16 splits
  assert.is(gemmTcSplits(128, 5120, 2048, tcp, 2048, 16, 256 / 16), 8);
  assert.is(gemmTcSplits(128, 2048, 4096, tcp, 2048, 16, 256 / 16), 16);
  // the linear layers past 64 rows take the prefill form (the staged forms up to 64)
  const defaults = { decodeRows: 64, tile: 0 as const, subgroups: "rows" as const };
  assert.is(tensorCoreVariantFor(64, 2048, defaults), "f16-tcs64x4");
  assert.is(
    tensorCoreVariantFor(65, 2048, { ...defaults, prefill: "tcp128x128" }),
    "f16-tcp128x128",
  );
});

test.run();
