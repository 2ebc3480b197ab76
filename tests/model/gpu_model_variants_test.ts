import { test } from "uvu";
import * as assert from "uvu/assert";
import { GpuModel, type GpuModelOptions } from "../../src/model/gpu_model.ts";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { unsupportedReason } from "../../kernels/kernel.ts";
import * as gemmTc from "../../kernels/gemm_tc.ts";
import { buildBatch, maxAbsDiff, prefillThenDecode, runStep } from "./gpu_model_step.ts";

/** tiny-qwen3-moe in f32 with room for these tests, and `options`. */
async function loadTiny(options: GpuModelOptions): Promise<GpuModel> {
  const { dir } = ensureFixture("tiny-qwen3-moe");
  return await GpuModel.load(await sharedGpu(), dir, {
    dtype: "f32",
    numBlocks: 32,
    maxModelLen: 64,
    maxNumSeqs: 4,
    maxNumTokens: 64,
    ...options,
  });
}

// A prompt of 20 tokens prefilled, then three decode steps fed from the GPU, for two
// sequences at once (or one: one-row decode steps): the decode attention forms and
// linear-layer forms must agree.
async function decodeLogits(options: GpuModelOptions, seqs = 2): Promise<Float32Array[]> {
  const model = await loadTiny(options);
  try {
    if (options.packedF16) {
      const v = model.linearVariants;
      assert.match(v.decodeAttention, /^\S+-packed /, `decode attention ${v.decodeAttention}`);
    }
    return await prefillThenDecode(model, [[1, 2, 3, 4], [5, 6, 7, 8]].slice(0, seqs), 3);
  } finally {
    model.destroy();
  }
}

test("decode attention: the tiled, direct and lanes forms give the same logits", async () => {
  const direct = await decodeLogits({ decodeAttention: "direct" });
  const tiled = await decodeLogits({ decodeAttention: "tiled" });
  const lanes = await decodeLogits({ decodeAttention: "lanes" });
  direct.forEach((d, i) => assert.ok(maxAbsDiff(d, tiled[i]) < 1e-4, `step ${i}: tiled`));
  direct.forEach((d, i) => assert.ok(maxAbsDiff(d, lanes[i]) < 1e-4, `step ${i}: lanes`));
});

test("q/k norm, RoPE and the KV write inside the tiled decode attention give the logits of qk_norm_rope_cache apart", async () => {
  for (const dtype of ["f32", "f16"] as const) {
    for (const seqs of [1, 2]) {
      const base = { dtype, decodeAttention: "tiled" as const };
      const model = await loadTiny(base);
      let inside: Float32Array[];
      try {
        assert.match(
          model.linearVariants.decodeAttention,
          /q\/k norm, RoPE and the KV write inside/,
        );
        inside = await prefillThenDecode(model, [[1, 2, 3, 4], [5, 6, 7, 8]].slice(0, seqs), 3);
      } finally {
        model.destroy();
      }
      const apart = await decodeLogits({ ...base, qkInDecodeAttention: false }, seqs);
      // the norms' sums of squares are added in another order: f32 rounding, then f16 K
      const tol = dtype === "f32" ? 1e-4 : 2e-2;
      apart.forEach((d, i) =>
        assert.ok(
          maxAbsDiff(d, inside[i]) < tol,
          `${dtype} ${seqs} seqs step ${i}: ${maxAbsDiff(d, inside[i])}`,
        )
      );
    }
  }
});

test("qk_norm_rope_cache's lab forms of 4 and 8 rotation pairs an invocation give the logits of the default", async () => {
  // f16 (the lab forms' only storage), the q/k norm apart in decode steps too
  const base = { dtype: "f16" as const, qkInDecodeAttention: false };
  const runs: Float32Array[][] = [];
  for (const qkNormPairs of [1, 4, 8] as const) {
    const model = await loadTiny({ ...base, qkNormPairs });
    try {
      const named = model.linearVariants.prefillAttention.includes(`qk_norm_rope_cache f16-p`);
      assert.is(named, qkNormPairs > 1, model.linearVariants.prefillAttention);
      runs.push(await prefillThenDecode(model, [[1, 2, 3, 4], [5, 6, 7, 8]], 3));
    } finally {
      model.destroy();
    }
  }
  for (const other of runs.slice(1)) {
    runs[0].forEach((d, i) => assert.ok(maxAbsDiff(d, other[i]) < 1e-3, `step ${i}`));
  }
});

test("linear layers: GEMV, staged GEMV and both GEMM tiles give the same logits", async () => {
  const gemv = await decodeLogits({ gemvMaxRows: 64 });
  const staged = await decodeLogits({ gemvMaxRows: 0, stagedMaxRows: 64 });
  const gemm = await decodeLogits({ gemvMaxRows: 0, stagedMaxRows: 0 });
  const wide = await decodeLogits({ gemvMaxRows: 0, stagedMaxRows: 0, gemmSmallMaxRows: 0 });
  wide.forEach((d, i) => assert.ok(maxAbsDiff(d, gemm[i]) < 1e-4, `step ${i}: 64x128 vs 64x64`));
  gemv.forEach((d, i) => assert.ok(maxAbsDiff(d, gemm[i]) < 1e-4, `step ${i}: gemv vs gemm`));
  staged.forEach((d, i) => assert.ok(maxAbsDiff(d, gemm[i]) < 1e-4, `step ${i}: staged vs gemm`));
  // the decode forms: several rows a step (dec8), then one row a step (dec)
  const dec = await decodeLogits({ gemvForms: "decode", gemvMaxRows: 1, stagedMaxRows: 64 });
  dec.forEach((d, i) => assert.ok(maxAbsDiff(d, gemm[i]) < 1e-4, `step ${i}: decode vs gemm`));
  // a lane-group form for many rows (the prompt's 40 rows: dec8's passes of 8)
  const laneMany = await decodeLogits({
    gemvForms: "decode",
    gemvMaxRows: 1,
    stagedMaxRows: 64,
    linearManyRows: "dec8",
  });
  laneMany.forEach((d, i) => assert.ok(maxAbsDiff(d, gemm[i]) < 1e-4, `step ${i}: dec8 many`));
  // per kind: the router's 8-row blocks side by side (grid z), the LM head on the GEMM
  const byKind = await decodeLogits({
    gemvForms: "decode",
    gemvMaxRows: 1,
    stagedMaxRows: 64,
    manyRowsByKind: { router: "dec8-rb", lmHead: "gemm" },
  });
  byKind.forEach((d, i) => assert.ok(maxAbsDiff(d, gemm[i]) < 1e-4, `step ${i}: by kind`));
  const one = { gemvMaxRows: 0, stagedMaxRows: 0 };
  const gemmOne = await decodeLogits(one, 1);
  const decOne = await decodeLogits({ gemvForms: "decode", gemvMaxRows: 1, stagedMaxRows: 0 }, 1);
  decOne.forEach((d, i) =>
    assert.ok(maxAbsDiff(d, gemmOne[i]) < 1e-4, `step ${i}: one-row decode vs gemm`)
  );
  // the one-row form by name (lanes of 8: it runs on every adapter with subgroups)
  const lanes8 = await decodeLogits(
    { gemvForms: "decode", gemvMaxRows: 1, stagedMaxRows: 0, linearOneRow: "dec" },
    1,
  );
  lanes8.forEach((d, i) =>
    assert.ok(maxAbsDiff(d, gemmOne[i]) < 1e-4, `step ${i}: linearOneRow dec vs gemm`)
  );
});

test("batch-1 steps norm each layer's input in the qkv GEMV and add the experts' rows in the down GEMM: the logits of the separate kernels, one dispatch a layer fewer", async () => {
  const one = { gemvForms: "decode" as const, gemvMaxRows: 1, stagedMaxRows: 0 };
  const apart = await decodeLogits({ ...one, qkvNormInGemv: false }, 1);
  const model = await loadTiny({ ...one, profile: true });
  try {
    const fused = await prefillThenDecode(model, [[1, 2, 3, 4]], 3);
    fused.forEach((d, i) =>
      assert.ok(maxAbsDiff(d, apart[i]) < 1e-4, `step ${i}: ${maxAbsDiff(d, apart[i])}`)
    );
    const kernels = (await model.lastStepSpans()).map((s) => s.kernel ?? s.label);
    const count = (k: string) => kernels.filter((x) => x === k).length;
    const kinds = model.config.layerKinds;
    assert.match(
      model.linearVariants.gemv,
      /the combine in the down GEMM, moe_gemm_down_combine, .*gemv_norm \(gemv_scaled after/,
    );
    // the first layer and the one after the dense layer norm in gemv_norm; after a MoE layer the
    // down GEMM weighted the row and summed its squares, and gemv_scaled scales
    const afterMoe = kinds.filter((k, l) => l + 1 < kinds.length && k === "moe").length;
    assert.is(count("gemv_scaled"), afterMoe, kernels.join(" "));
    assert.is(count("gemv_norm"), kinds.length - afterMoe, kernels.join(" "));
    assert.is(count("moe_gemm_down_combine"), kinds.filter((k) => k === "moe").length);
    // each layer's post-attention norm (the f32 routers take none) and the final one: no input
    // norm, and no combine of either kind
    assert.is(count("rmsnorm"), kinds.length + 1);
    assert.is(count("moe_combine") + count("moe_combine_norm") + count("moe_gemm_down"), 0);
  } finally {
    model.destroy();
  }
  // the down GEMM's combine off: the plain combine, the norm still in the GEMV
  const plainCombine = await decodeLogits({ ...one, moeDownCombineTokens: 0 }, 1);
  plainCombine.forEach((d, i) => assert.ok(maxAbsDiff(d, apart[i]) < 1e-4, `step ${i}`));
  // gemv_norm in every layer
  const normEvery = await decodeLogits({ ...one, qkvScaledAfterMoe: false }, 1);
  normEvery.forEach((d, i) => assert.ok(maxAbsDiff(d, apart[i]) < 1e-4, `step ${i}`));
});

test("f16 batch-1 steps split the o projection's GEMV in k: the router and the down GEMM add its partial sums, and the logits are those of the unsplit GEMV and the separate kernels", async () => {
  const one = { dtype: "f16" as const, gemvForms: "decode" as const, gemvMaxRows: 1 };
  const base = { ...one, stagedMaxRows: 0 };
  const apart = await decodeLogits({ ...base, qkvNormInGemv: false }, 1);
  const unsplit = await decodeLogits({ ...base, oSplitsOneRow: 1 }, 1);
  const model = await loadTiny({ ...base, oSplitsOneRow: 4, profile: true });
  try {
    const split = await prefillThenDecode(model, [[1, 2, 3, 4]], 3);
    assert.is(model.lastOSplits, 4);
    // f16 rows (the router's normed row, the activations): the partial sums' rounding shows
    split.forEach((d, i) => {
      assert.ok(maxAbsDiff(d, unsplit[i]) < 2e-2, `step ${i}: ${maxAbsDiff(d, unsplit[i])}`);
      assert.ok(maxAbsDiff(d, apart[i]) < 2e-2, `step ${i}: ${maxAbsDiff(d, apart[i])}`);
    });
    const kernels = (await model.lastStepSpans()).map((s) => s.kernel ?? s.label);
    const moeLayers = model.config.layerKinds.filter((k) => k === "moe").length;
    const count = (k: string) => kernels.filter((x) => x === k).length;
    assert.is(count("moe_router_logits"), moeLayers, kernels.join(" "));
    assert.is(count("moe_gemm_down_combine"), moeLayers);
  } finally {
    model.destroy();
  }
  let refused = "";
  await decodeLogits({ ...base, oSplitsOneRow: 17 }, 1).catch((e) => refused = e.message);
  assert.match(refused, /oSplitsOneRow 17 must be an integer in 1\.\.16/);
});

test("a linear form that does not exist or cannot run here is refused by name", async () => {
  let refused = "";
  await decodeLogits({ gemvForms: "decode", linearManyRows: "dec9" }).catch((e) =>
    refused = e.message
  );
  assert.match(refused, /linearManyRows 'dec9' is no GEMV form \(.*dec8-w32/);
  refused = "";
  await decodeLogits({ gemvForms: "rows", linearFewRows: "dec8" }).catch((e) =>
    refused = e.message
  );
  assert.match(refused, /linearFewRows needs the decode GEMV forms/);
  refused = "";
  await decodeLogits({ gemvForms: "decode", linearFewRows: "staged" }).catch((e) =>
    refused = e.message
  );
  assert.match(refused, /linearFewRows 'staged' is no several-row lane-group form/);
  refused = "";
  await decodeLogits({ gemvForms: "rows", linearOneRow: "dec" }).catch((e) => refused = e.message);
  assert.match(refused, /linearOneRow needs the decode GEMV forms/);
  refused = "";
  await decodeLogits({ gemvForms: "decode", linearOneRow: "dec-w64" }).catch((e) =>
    refused = e.message
  );
  assert.match(refused, /linearOneRow 'dec-w64' is no GEMV form \(.*dec-w32u8/);
});

test("linearManyRows gemm sends every kind's 9-128 rows to the GEMM", async () => {
  const model = await loadTiny({
    gemvForms: "decode",
    stagedMaxRows: 64,
    linearManyRows: "gemm",
    manyRowsByKind: { router: "dec8-rb" },
  });
  try {
    assert.match(model.linearVariants.gemv, /then the GEMM up to 64; router dec8-rb there/);
  } finally {
    model.destroy();
  }
  const viaGemm = await decodeLogits({
    gemvForms: "decode",
    stagedMaxRows: 64,
    linearManyRows: "gemm",
  });
  const gemm = await decodeLogits({ gemvMaxRows: 0, stagedMaxRows: 0 });
  viaGemm.forEach((d, i) => assert.ok(maxAbsDiff(d, gemm[i]) < 1e-4, `step ${i}`));
});

test("the decode GEMV forms on f16 weights (read as 32-bit words) match the staged form", async () => {
  const f16 = { dtype: "f16" as const, stagedMaxRows: 64 };
  for (const seqs of [2, 1]) {
    const staged = await decodeLogits({ ...f16, gemvForms: "classic", gemvMaxRows: 0 }, seqs);
    const dec = await decodeLogits({ ...f16, gemvForms: "decode", gemvMaxRows: 1 }, seqs);
    dec.forEach((d, i) => assert.ok(maxAbsDiff(d, staged[i]) < 1e-4, `${seqs} seqs, step ${i}`));
  }
});

test("f16 read as 32-bit words (packedF16) gives the same logits as 16-bit loads", async () => {
  // Staged GEMV, both decode attention forms and the staged MoE GEMMs take the packed path.
  // (the packed tiled form has no twin that norms q itself: qk_norm_rope_cache apart in both)
  for (const decodeAttention of ["direct", "tiled"] as const) {
    const base = {
      dtype: "f16" as const,
      gemvMaxRows: 0,
      stagedMaxRows: 64,
      decodeAttention,
      qkInDecodeAttention: false,
    };
    const loads16 = await decodeLogits({ ...base, packedF16: false });
    const words = await decodeLogits({ ...base, packedF16: true });
    loads16.forEach((d, i) =>
      assert.is(maxAbsDiff(d, words[i]), 0, `${decodeAttention} step ${i}: bit-identical`)
    );
  }
});

test("the MoE router's fused input norm gives the logits of the separate rmsnorm, at batch 1 too", async () => {
  const f16 = { dtype: "f16" as const };
  for (const seqs of [1, 2]) {
    const apart = await decodeLogits(
      { ...f16, moeRouterNorm: false, moeFusedRouterMinTokens: 1 },
      seqs,
    );
    const fused = await decodeLogits({ ...f16, moeFusedRouterMinTokens: 1 }, seqs);
    fused.forEach((d, i) => {
      const diff = maxAbsDiff(d, apart[i]);
      assert.ok(diff < 1e-3, `${seqs} sequences, step ${i}: ${diff}`);
    });
  }
  const model = await loadTiny({ ...f16, moeFusedRouterMinTokens: 1 });
  try {
    assert.match(
      model.linearVariants.gemv,
      /moe_router_norm \(with its input RMSNorm\), at 1-128 tokens/,
    );
  } finally {
    model.destroy();
  }
});

// The tensor-core GEMM needs f16 subgroup matrices: on adapters without them (lavapipe) this
// is skipped, and the model refuses the option by name (the next test).
const tensorCores = unsupportedReason(await sharedGpu(), gemmTc.spec.variants[0]) === null;

(tensorCores ? test : test.skip)(
  "linear layers on the tensor cores give the logits of the FMA GEMM (f16 activations)",
  async () => {
    const f16 = { dtype: "f16" as const, gemvMaxRows: 0, stagedMaxRows: 0 };
    const fma = await decodeLogits(f16);
    // every linear of every step on the tensor cores (not the LM head: the fixture's vocabulary
    // is no multiple of 16), with each row tile. The fixture's inputs (k at most 96) are too
    // short for split-K (8 slices of 16 a split at least): the target changes nothing here, and
    // the split path is covered by validate's split rows and the H200's logits check.
    for (const tile of [0, 16, 32, 64] as const) {
      for (const split of [0, 1e6]) {
        const tc = await decodeLogits({
          ...f16,
          tensorCoreRows: 1,
          tensorCoreTile: tile,
          tensorCoreSplitTarget: split,
        });
        tc.forEach((d, i) => {
          const diff = maxAbsDiff(d, fma[i]);
          assert.ok(diff < 2e-2, `tile ${tile}, split target ${split}, step ${i}: ${diff}`);
        });
      }
    }
  },
);

(tensorCores ? test : test.skip)(
  "the MoE expert GEMMs on the tensor cores give the prefill logits of the FMA forms",
  async () => {
    const f16 = { dtype: "f16" as const, gemvMaxRows: 0, stagedMaxRows: 0, tensorCoreRows: 0 };
    // two prompts of 20 tokens: 80 rows over 8 experts, 10 an expert (above 1: the tensor cores)
    const prompts = [0, 1].map((s) => ({
      tokens: Array.from({ length: 20 }, (_, i) => 100 + 37 * i + s),
      start: 0,
      table: [1 + 4 * s, 2 + 4 * s],
      rows: "all" as const,
    }));
    const prefill = async (moeTensorCoreRows: number) => {
      const model = await loadTiny({ ...f16, moeTensorCoreRows });
      try {
        const { logits } = await runStep(model, prompts);
        return { logits, variant: model.moeGemmVariant };
      } finally {
        model.destroy();
      }
    };
    const fma = await prefill(0);
    const tc = await prefill(1);
    assert.is(tc.variant, "f16-tc");
    assert.is.not(fma.variant, "f16-tc");
    const diff = maxAbsDiff(tc.logits, fma.logits);
    assert.ok(diff < 2e-2, `prefill logits: ${diff}`);
  },
);

test("tensorCoreRows is refused by name where the tensor cores cannot run", async () => {
  let refused = "";
  await decodeLogits({ dtype: "f32", tensorCoreRows: 1 }).catch((e) => refused = e.message);
  assert.match(refused, /tensorCoreRows needs the tensor-core GEMM.*the weights are not f16/);
  if (!tensorCores) {
    refused = "";
    await decodeLogits({ dtype: "f16", tensorCoreRows: 1 }).catch((e) => refused = e.message);
    assert.match(refused, /tensorCoreRows needs the tensor-core GEMM.*subgroup matri/);
  }
});

test("prefill attention: the tensor-core forms are refused by name where they cannot run", async () => {
  // the fixture's head_dim (16) is no tensor-core variant's, on every adapter
  const fma = await loadTiny({ dtype: "f16" });
  try {
    assert.is(fma.linearVariants.prefillAttention, "paged_attention f16");
  } finally {
    fma.destroy();
  }
  for (const form of ["tc", "tc2", "tcs", "tcs2", "tcs4"] as const) {
    let refused = "";
    await loadTiny({ dtype: "f16", prefillAttention: form }).catch((e) => refused = e.message);
    assert.match(refused, new RegExp(`prefillAttention "${form}" cannot run here: .*head_dim 16`));
    refused = "";
    await loadTiny({ dtype: "f32", prefillAttention: form }).catch((e) => refused = e.message);
    assert.match(refused, /cannot run here: the KV cache is not f16/);
  }
});

test("steps submitted a layer at a time give the logits of one submit a step", async () => {
  const whole = await decodeLogits({ submitLayers: 0 });
  const layered = await decodeLogits({ submitLayers: 1 });
  for (let i = 0; i < whole.length; i++) {
    assert.is(maxAbsDiff(whole[i], layered[i]), 0, `decode step ${i}`);
  }
  // a step with nothing in flight goes in groups of layers, unless it asks for one submit
  const model = await loadTiny({ submitLayers: 1 });
  try {
    const part = { tokens: [1, 2, 3], start: 0, table: [1], rows: "last" as const };
    const { batch } = buildBatch(model.blockSize, [part]);
    const out = model.forward(batch);
    await out.sampled;
    assert.is(model.lastStepSubmits, model.config.numLayers, "a submit a layer");
    // every submit's host time is counted, and it is part of forward()'s
    const { submitMs, forwardMs } = model.lastEncodeParts;
    assert.ok(
      out.submitCallMs! >= submitMs,
      `${out.submitCallMs} ms of submits, the last ${submitMs}`,
    );
    assert.ok(out.submitCallMs! <= forwardMs, `${out.submitCallMs} ms of submits in ${forwardMs}`);
    await model.forward({ ...batch, oneSubmit: true }).sampled;
    assert.is(model.lastStepSubmits, 1, "oneSubmit");
  } finally {
    model.destroy();
  }
  await loadTiny({ submitLayers: -1 }).then(
    () => assert.unreachable("a negative submitLayers was taken"),
    (e) => assert.match(String(e), /submitLayers -1 must be an integer >= 0/),
  );
});

test.run();
