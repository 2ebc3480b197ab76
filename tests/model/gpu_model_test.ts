/**
 * The GPU model end to end on the three fixtures (Qwen3-MoE bf16 checkpoint, Mixtral f16
 * with a transformers-5 config and tied embeddings, dense Qwen3 f32 in two shards), in
 * f32 and f16 storage, against the CPU reference and against itself.
 *
 * One scenario per (fixture, dtype), block_size 4, X = 8 prompt tokens + 2 generated:
 * ```
 * step  sequences (blocks)                                     rows
 * S1    A prefill X[0..8)              A [1 2 3]               8 (greedy)
 * S2    A decode pos 8  <- S1 row 7 (prevSampleRef)            1
 * S3    A decode pos 9  <- S2 row 0 (prevSampleRef)            1
 * S4    B prefill X[0..10)             B [5 6 7]               10 + 4 temperature rows
 * S5    A decode pos 9 again (X[9]) | C prefill X[0..4)  C [8 9 10]    1 | 4
 * S6    C prefill X[4..8) | J prefill 4 junk tokens  J [11]    4 | 0  (fills block 11)
 * S7    C prefill X[8..10)                                     2
 * S8    A decode pos 10 (token u)      A [1 2 3]               1
 *       F decode pos 10 (token t)      F [1 2 11], copy 3 -> 11  1  (a fork of A at 10)
 * ```
 * X = prompt + [S1 row 7, S2 row 0] (greedy on the GPU), so the CPU reference of X checks
 * every step, and the tokens fed through prevSampleRef are the ones S1 and S2 sampled.
 * Re-running a decode (S5) rewrites its K/V slot with the same values. With the model's
 * default split (GEMV up to 8 rows, GEMM above), S4 runs its linear layers as GEMMs and
 * every other step as GEMVs, so "chunked vs one prefill" also holds the two against
 * each other.
 *
 * Tolerances, max |difference| over every logit: GPU vs CPU f32 1e-4, f16 2e-2 (the
 * reference rounds weights to f16 too; the GPU KV cache is f16, the reference's is not);
 * GPU vs GPU (decode vs long prefill, chunked vs one prefill, mixed vs alone) f32 1e-4,
 * f16 1e-2 (one f16 ulp of a cached K/V value that two batch shapes round differently).
 * The measured errors are printed once per scenario.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { packSamplingRows, sampleRef } from "../../kernels/sample.ts";
import { openGpu } from "../../src/gpu/device.ts";
import { GpuModel } from "../../src/model/gpu_model.ts";
import { ModelOptionError } from "../../src/model/model_option_error.ts";
import type { StorageDtype } from "../../src/model/gpu_weights.ts";
import { ReferenceKvCache, ReferenceModel } from "../../src/model/reference_model.ts";
import { ModelTokenizer } from "../../src/model/tokenizer.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { readBuffer } from "../../src/gpu/buffers.ts";
import {
  argmax,
  buildBatch,
  type ExtraRow,
  maxAbsDiff,
  row,
  runStep,
  type StepResult,
} from "./gpu_model_step.ts";

const FIXTURES = ["tiny-qwen3-moe", "tiny-mixtral", "tiny-qwen3"] as const;
const DTYPES: readonly StorageDtype[] = ["f32", "f16"];
const VS_CPU: Record<StorageDtype, number> = { f32: 1e-4, f16: 2e-2 };
/**
 * GPU against GPU. f16: a K/V value that two batch shapes compute 1e-7 apart can round to
 * neighbouring f16 values in the cache, and that one ulp moves logits by up to ~1e-3.
 */
const VS_GPU: Record<StorageDtype, number> = { f32: 1e-4, f16: 1e-2 };
const MODEL_OPTIONS = {
  blockSize: 4,
  numBlocks: 16,
  maxNumTokens: 32,
  maxNumSeqs: 4,
  maxModelLen: 64,
} as const;
const JUNK = [151643, 42, 7, 99999];
/** Temperature rows of S4: two identical (seed, position) draws, another seed, another row. */
const EXTRA: readonly ExtraRow[] = [
  { part: 0, index: 9, temperature: 1, seed: 7 },
  { part: 0, index: 9, temperature: 1, seed: 7 },
  { part: 0, index: 9, temperature: 1, seed: 8 },
  { part: 0, index: 8, temperature: 0.7, seed: 7 },
];

interface Scenario {
  readonly vocab: number;
  readonly s: Record<string, StepResult>;
  /** CPU reference logits of X [10, vocab], and of X[0..10) + u and + t at position 10. */
  readonly ref: Float32Array;
  readonly refU: Float32Array;
  readonly refT: Float32Array;
  /** Max abs errors measured, by check. */
  readonly errors: Map<string, number>;
}

const dirs = Object.fromEntries(FIXTURES.map((f) => [f, ensureFixture(f).dir])) as Record<
  (typeof FIXTURES)[number],
  string
>;
const prompt = Array.from(
  ModelTokenizer.fromDir(dirs["tiny-qwen3"]).encode("The quick brown fox jumps over the lazy dog"),
).slice(0, 8);

async function runScenario(
  fixture: (typeof FIXTURES)[number],
  dtype: StorageDtype,
): Promise<Scenario> {
  const gpu = await sharedGpu();
  const model = await GpuModel.load(gpu, dirs[fixture], { dtype, ...MODEL_OPTIONS });
  try {
    const vocab = model.vocabSize;
    const A = [1, 2, 3], B = [5, 6, 7], C = [8, 9, 10], J = [11], F = [1, 2, 11];
    const s: Record<string, StepResult> = {};
    s.S1 = await runStep(model, [{ tokens: prompt, start: 0, table: A, rows: "all" }]);
    s.S2 = await runStep(model, [{ tokens: [{ ref: 7 }], start: 8, table: A, rows: "last" }]);
    s.S3 = await runStep(model, [{ tokens: [{ ref: 0 }], start: 9, table: A, rows: "last" }]);
    const x = [...prompt, s.S1.sampled[7], s.S2.sampled[0]];
    s.S4 = await runStep(model, [{ tokens: x, start: 0, table: B, rows: "all" }], EXTRA);
    s.S5 = await runStep(model, [
      { tokens: [x[9]], start: 9, table: A, rows: "last" },
      { tokens: x.slice(0, 4), start: 0, table: C, rows: "all" },
    ]);
    s.S6 = await runStep(model, [
      { tokens: x.slice(4, 8), start: 4, table: C, rows: "all" },
      { tokens: JUNK, start: 0, table: J, rows: "none" },
    ]);
    s.S7 = await runStep(model, [{ tokens: x.slice(8), start: 8, table: C, rows: "all" }]);
    const u = x[0], t = x[3];
    s.S8 = await runStep(
      model,
      [
        { tokens: [u], start: 10, table: A, rows: "last" },
        { tokens: [t], start: 10, table: F, rows: "last" },
      ],
      [],
      [[3, 11]],
    );

    const reference = ReferenceModel.load(dirs[fixture], { roundWeightsToF16: dtype === "f16" });
    const cache = reference.newCache();
    const ref = reference.forward(cache, x).logits;
    const refU = reference.forward(cloneCache(cache), [u]).logits;
    const refT = reference.forward(cloneCache(cache), [t]).logits;
    return { vocab, s, ref, refU, refT, errors: new Map() };
  } finally {
    model.destroy();
  }
}

function cloneCache(cache: ReferenceKvCache): ReferenceKvCache {
  const copy = new ReferenceKvCache(cache.keys.length);
  cache.keys.forEach((k, l) => copy.keys[l].push(...k));
  cache.values.forEach((v, l) => copy.values[l].push(...v));
  return copy;
}

/** Asserts max |a - b| <= tolerance and records the error under `what`. */
function close(sc: Scenario, what: string, a: Float32Array, b: Float32Array, tol: number) {
  const err = maxAbsDiff(a, b);
  sc.errors.set(what, Math.max(sc.errors.get(what) ?? 0, err));
  assert.ok(err <= tol, `${what}: max abs error ${err.toExponential(2)} > ${tol}`);
}

for (const fixture of FIXTURES) {
  for (const dtype of DTYPES) {
    const name = `${fixture} ${dtype}`;
    const tol = VS_CPU[dtype];
    const gtol = VS_GPU[dtype];
    let scenario: Promise<Scenario> | undefined;
    const get = () => scenario ??= runScenario(fixture, dtype);

    test(`${name}: prompt logits equal the CPU reference within ${tol}`, async () => {
      const sc = await get();
      const { vocab } = sc;
      close(sc, "prefill vs CPU", sc.s.S1.logits, sc.ref.subarray(0, 8 * vocab), tol);
      close(sc, "prefill vs CPU", sc.s.S4.logits.subarray(0, 10 * vocab), sc.ref, tol);
    });

    test(`${name}: decode steps fed by prevSampleRef give the logits of one long prefill`, async () => {
      const sc = await get();
      const { vocab, s } = sc;
      const long = (p: number) => row(s.S4.logits, vocab, p);
      close(sc, "decode vs CPU", s.S2.logits, row(sc.ref, vocab, 8), tol);
      close(sc, "decode vs CPU", s.S3.logits, row(sc.ref, vocab, 9), tol);
      close(sc, "decode vs long prefill", row(s.S1.logits, vocab, 7), long(7), gtol);
      close(sc, "decode vs long prefill", s.S2.logits, long(8), gtol);
      close(sc, "decode vs long prefill", s.S3.logits, long(9), gtol);
    });

    test(`${name}: chunked prefill in 3 chunks equals one prefill`, async () => {
      const sc = await get();
      const { vocab, s } = sc;
      const chunked = new Float32Array(10 * vocab);
      chunked.set(s.S5.logits.subarray(vocab), 0);
      chunked.set(s.S6.logits, 4 * vocab);
      chunked.set(s.S7.logits, 8 * vocab);
      close(sc, "chunked vs one prefill", chunked, s.S4.logits.subarray(0, 10 * vocab), gtol);
    });

    test(`${name}: a decode and a prefill in one step equal each run alone`, async () => {
      const sc = await get();
      const { vocab, s } = sc;
      // S5 = A's decode at 9 (row 0, alone in S3) + C's first chunk (rows 1..4, alone in S4).
      close(sc, "mixed vs alone", row(s.S5.logits, vocab, 0), s.S3.logits, gtol);
      close(
        sc,
        "mixed vs alone",
        s.S5.logits.subarray(vocab),
        s.S4.logits.subarray(0, 4 * vocab),
        gtol,
      );
    });

    test(`${name}: a CoW block copy gives the forked sequence the same KV`, async () => {
      const sc = await get();
      const { vocab, s } = sc;
      // Without the copy F would read J's junk K/V at positions 8 and 9.
      close(sc, "fork vs CPU", row(s.S8.logits, vocab, 0), sc.refU, tol);
      close(sc, "fork vs CPU", row(s.S8.logits, vocab, 1), sc.refT, tol);
    });

    test(`${name}: greedy sampling is the argmax of the returned logits; temperature draws are the CPU reference's for (seed, position)`, async () => {
      const sc = await get();
      const { vocab, s } = sc;
      for (const [label, step] of Object.entries(s)) {
        step.batch.sampling.forEach((p, r) => {
          if (p.temperature === 0) {
            assert.is(step.sampled[r], argmax(row(step.logits, vocab, r)), `${label} row ${r}`);
          }
        });
      }
      const S4 = s.S4;
      const rows = S4.batch.sampleTokenIndices.length;
      const sampling = packSamplingRows(S4.batch.sampling.map((p, r) => ({
        temperature: p.temperature,
        seed: p.seed,
        position: S4.batch.positions[S4.batch.sampleTokenIndices[r]],
      })));
      assert.equal(
        Array.from(S4.sampled),
        Array.from(sampleRef(S4.logits, rows, vocab, sampling)),
        "S4: every row as the CPU sampler draws it",
      );
      const [a, b, c] = S4.extraRows.map((r) => S4.sampled[r]);
      assert.is(a, b, "same logits, seed and position: same token");
      assert.is.not(a, c, "another seed draws another token here");
      assert.is.not(a, S4.sampled[S4.partRows[0][9]], "T=1 does not just take the argmax here");
      console.log(
        `  ${name}: max abs error ${
          [...sc.errors].map(([k, v]) => `${k} ${v.toExponential(1)}`).join(", ")
        }`,
      );
    });
  }
}

test("a step with more tokens than maxNumTokens, or a context past maxModelLen, is refused by name", async () => {
  const gpu = await sharedGpu();
  const model = await GpuModel.load(gpu, dirs["tiny-qwen3"], { dtype: "f32", ...MODEL_OPTIONS });
  try {
    const tooMany = buildBatch(4, [{
      tokens: new Array(33).fill(9707),
      start: 0,
      table: Array.from({ length: 9 }, (_, i) => i + 1),
      rows: "last",
    }]).batch;
    assert.throws(() => model.forward(tooMany), /33 tokens, this model takes 1\.\.32 a step/);
    const tooLong = buildBatch(4, [{
      tokens: [9707],
      start: 64,
      table: Array.from({ length: 17 }, (_, i) => i % 15 + 1),
      rows: "last",
    }]).batch;
    assert.throws(() => model.forward(tooLong), /context 65 exceeds max model length 64/);
  } finally {
    model.destroy();
  }
});

test("decode attention's split budget: positive integers, workgroups or wave, refused by name", async () => {
  const gpu = await sharedGpu();
  const load = (decodeSplit: { workgroups?: number; wave?: number; minTokens?: number }) =>
    GpuModel.load(gpu, dirs["tiny-qwen3"], { dtype: "f32", ...MODEL_OPTIONS, decodeSplit });
  const refused = async (split: Parameters<typeof load>[0], message: RegExp) => {
    let error: unknown = null;
    await load(split).then((m) => m.destroy(), (e) => error = e);
    assert.instance(error, ModelOptionError, `${JSON.stringify(split)}`);
    assert.match((error as Error).message, message);
  };
  await refused({ wave: 0 }, /decodeSplit\.wave = 0 must be a positive integer/);
  await refused({ workgroups: 1.5 }, /decodeSplit\.workgroups = 1\.5 must be/);
  await refused({ minTokens: -1 }, /decodeSplit\.minTokens = -1 must be/);
  await refused({ workgroups: 64, wave: 64 }, /takes workgroups or wave, not both/);
  (await load({ wave: 64 })).destroy();
});

test("moeFusedRouterMinTokens below 1 is refused by name", async () => {
  const gpu = await sharedGpu();
  for (const fewest of [0, 1.5]) {
    let error: unknown = null;
    await GpuModel.load(gpu, dirs["tiny-qwen3"], {
      dtype: "f32",
      ...MODEL_OPTIONS,
      moeFusedRouterMinTokens: fewest,
    }).then((m) => m.destroy(), (e) => error = e);
    assert.instance(error, ModelOptionError, `${fewest}`);
    assert.match((error as Error).message, /moeFusedRouterMinTokens .* must be a positive integer/);
  }
});

test("a step records the host time it took before its submit (lastEncodeMs)", async () => {
  const gpu = await sharedGpu();
  const model = await GpuModel.load(gpu, dirs["tiny-qwen3"], { dtype: "f32", ...MODEL_OPTIONS });
  try {
    assert.is(model.lastEncodeMs, 0, "no step yet");
    const t0 = performance.now();
    const out = model.forward(
      buildBatch(4, [{ tokens: [9707, 11, 1879], start: 0, table: [1], rows: "last" }]).batch,
    );
    const outside = performance.now() - t0;
    await out.sampled;
    assert.ok(model.lastEncodeMs > 0, `${model.lastEncodeMs}`);
    assert.ok(model.lastEncodeMs <= outside, `${model.lastEncodeMs} > ${outside}`);
  } finally {
    model.destroy();
  }
});

test("a stage repeated in the step (stageEdit) gives the same outputs where it is idempotent, left out does not, and the step names its stages", async () => {
  const gpu = await sharedGpu();
  const model = await GpuModel.load(gpu, dirs["tiny-qwen3-moe"], {
    dtype: "f32",
    ...MODEL_OPTIONS,
  });
  try {
    const decode = () =>
      buildBatch(4, [
        { tokens: prompt.slice(0, 3), start: 0, table: [1], rows: "last" },
        { tokens: prompt.slice(2, 6), start: 0, table: [2], rows: "last" },
      ]).batch;
    const step = async () => {
      const out = model.forward(decode());
      return await Promise.all([out.sampled, out.logits!]);
    };
    model.countStages = true;
    const [ids, logits] = await step();
    model.countStages = false;
    const uses = model.lastStepStageUses;
    const layers = model.config.numLayers;
    assert.is(uses.get("linear qkv"), layers, [...uses].join(" "));
    assert.ok(uses.has("moe down") && uses.has("sample"), [...uses].join(" "));
    // the qkv projection writes what it reads from nothing it writes: twice gives the same step
    model.stageEdit = { stage: "linear qkv", times: 2 };
    const [ids2, logits2] = await step();
    assert.equal(ids2, ids);
    assert.is(maxAbsDiff(logits2, logits), 0);
    // the combine adds the experts' rows to the residual: twice, the residual differs
    model.stageEdit = { stage: "moe combine", times: 2 };
    const [, logits3] = await step();
    assert.ok(maxAbsDiff(logits3, logits) > 1e-3, "the repeat reached the step");
    // and left out, the residual misses the experts' rows
    model.stageEdit = { stage: "moe combine", times: 0 };
    const [, logits5] = await step();
    assert.ok(maxAbsDiff(logits5, logits) > 1e-3, "the drop reached the step");
    assert.ok(maxAbsDiff(logits5, logits3) > 1e-3);
    model.stageEdit = null;
    const [ids4, logits4] = await step();
    assert.equal(ids4, ids);
    assert.is(maxAbsDiff(logits4, logits), 0);
  } finally {
    model.destroy();
  }
});

test("a step prepared ahead of the step before it launches with its own inputs and params", async () => {
  const gpu = await sharedGpu();
  const model = await GpuModel.load(gpu, dirs["tiny-qwen3-moe"], {
    dtype: "f32",
    ...MODEL_OPTIONS,
  });
  try {
    const steps = (table: number[]) => [
      buildBatch(4, [{ tokens: prompt, start: 0, table, rows: "all" }]).batch,
      buildBatch(4, [{ tokens: [{ ref: 7 }], start: 8, table, rows: "last" }]).batch,
    ];
    const direct = [];
    for (const batch of steps([1, 2, 3])) {
      const out = model.forward(batch);
      direct.push(await Promise.all([out.sampled, out.logits!]));
    }
    // both encoded before either is submitted: the second step's writes (one token, its
    // params) must not land before the first step runs
    const [first, second] = steps([5, 6, 7]).map((batch) => model.prepare(batch));
    assert.throws(
      () => model.forward(steps([9, 10, 11])[0]),
      /a prepared step has not been launched/,
    );
    assert.throws(() => second.launch(), /prepared step 1 launched before step 0/);
    const outs = [first.launch(), second.launch()];
    const ahead = await Promise.all(outs.map((o) => Promise.all([o.sampled, o.logits!])));
    for (let i = 0; i < 2; i++) {
      assert.equal(ahead[i][0], direct[i][0], `step ${i}: sampled ids`);
      assert.is(maxAbsDiff(ahead[i][1], direct[i][1]), 0, `step ${i}: logits`);
    }
    const again = model.forward(steps([9, 10, 11])[0]);
    assert.equal(await again.sampled, direct[0][0], "forward() works again once all launched");
  } finally {
    model.destroy();
  }
});

test("split-K partials that grow while a prepared step waits stay alive until it is submitted", async () => {
  // a device of its own with Dawn's validation on, whatever WEBFPM_DAWN_VALIDATION says: without
  // it a submit naming a destroyed buffer reads freed memory instead of failing
  const gpu = await openGpu({ validation: true });
  // splits of 4 keys: a decode step at 21 keys writes split-K partials
  const model = await GpuModel.load(gpu, dirs["tiny-qwen3"], {
    dtype: "f32",
    ...MODEL_OPTIONS,
    decodeSplit: { minTokens: 4 },
  });
  try {
    const prefill = (table: number[]) =>
      buildBatch(4, [{ tokens: [...prompt, ...prompt.slice(0, 4)], start: 0, table, rows: "last" }])
        .batch;
    const decode = (table: number[]) =>
      buildBatch(4, [{ tokens: [{ ref: 0 }], start: 12, table, rows: "last" }]).batch;
    await model.forward(prefill([1, 2, 3, 4])).sampled;
    const want = model.forward(decode([1, 2, 3, 4]));
    const [wantIds, wantLogits] = await Promise.all([want.sampled, want.logits!]);
    await model.forward(prefill([5, 6, 7, 8])).sampled;
    const step = model.prepare(decode([5, 6, 7, 8]));
    assert.ok((model.lastDecodeSplit?.numSplits ?? 0) > 1, "the step writes split-K partials");
    model.ensurePartials(1 << 16); // a later step's plan outgrows them: new buffers
    gpu.device.pushErrorScope("validation");
    const got = step.launch();
    const error = await gpu.device.popErrorScope();
    assert.is(error?.message ?? null, null, "the prepared step's submit is valid");
    const [ids, logits] = await Promise.all([got.sampled, got.logits!]);
    assert.equal(ids, wantIds);
    assert.is(maxAbsDiff(logits, wantLogits), 0);
  } finally {
    model.destroy();
    gpu.destroy();
  }
});

test("weights and KV in arenas (weightPlacement, kvPlacement) give the logits and KV of a buffer each", async () => {
  const gpu = await sharedGpu();
  // tiny-mixtral ties its LM head to the embedding: one range read by both
  for (const [fixture, dtype] of [["tiny-qwen3-moe", "f16"], ["tiny-mixtral", "f32"]] as const) {
    if (dtype === "f16" && !gpu.f16) continue;
    const run = async (placement: "each" | "arena") => {
      const model = await GpuModel.load(gpu, dirs[fixture], {
        dtype,
        ...MODEL_OPTIONS,
        weightPlacement: placement,
        kvPlacement: placement,
      });
      try {
        const w = model.weights;
        assert.is(w.placement, placement);
        assert.is(model.kv.placement, placement);
        const kv = model.kv.layers.flatMap((l) => [l.k, l.v]);
        if (placement === "arena") {
          // every weight and KV range in one arena of its kind (lavapipe's largest buffer
          // holds them all), none overlapping, each on its alignment
          assert.is(w.bufferCount, 1);
          const ranges = [
            w.embed,
            w.finalNorm,
            ...w.layers.flatMap((l) => [
              l.inputNorm,
              l.postNorm,
              l.qkv,
              l.o,
              l.gateUp,
              l.down,
              ...[l.qNorm, l.kNorm, l.router].filter((x) => x !== null),
            ]),
          ];
          for (const set of [[...ranges], [...kv]]) {
            set.sort((a, b) => a.offset - b.offset);
            for (let i = 0; i < set.length; i++) {
              assert.is(set[i].buffer, set[0].buffer);
              assert.is(set[i].offset % (set[i].size >= 2 ** 21 ? 2 ** 21 : 256), 0);
              if (i > 0) assert.ok(set[i].offset >= set[i - 1].offset + set[i - 1].size);
            }
          }
        } else {
          assert.is(w.layers[0].qkv.offset, 0);
          assert.ok(w.layers[0].qkv.buffer !== w.layers[0].o.buffer);
          assert.ok(kv.every((r) => r.offset === 0));
        }
        // prefill, decode, a decode on a copy of block 2 (block 3), then one that zeroes block 2
        const logits = [
          (await runStep(model, [{
            tokens: prompt.slice(0, 6),
            start: 0,
            table: [1, 2],
            rows: "all",
          }]))
            .logits,
          (await runStep(model, [{ tokens: [9707], start: 6, table: [1, 2], rows: "last" }]))
            .logits,
          (await runStep(
            model,
            [{ tokens: [1879], start: 7, table: [1, 3], rows: "last" }],
            [],
            [[2, 3]],
          )).logits,
        ];
        const { batch } = buildBatch(model.blockSize, [
          { tokens: [11], start: 8, table: [1, 3, 4], rows: "last" },
        ]);
        const out = model.forward({ ...batch, blockZeros: [2] });
        logits.push((await Promise.all([out.sampled, out.logits!]))[1]);
        const caches = [];
        for (const r of kv) {
          caches.push(new Uint8Array(await readBuffer(gpu.device, r.buffer, r.size, r.offset)));
        }
        return { logits, caches };
      } finally {
        model.destroy();
      }
    };
    const each = await run("each");
    const arena = await run("arena");
    for (let i = 0; i < each.logits.length; i++) {
      assert.is(maxAbsDiff(arena.logits[i], each.logits[i]), 0, `${fixture} ${dtype} step ${i}`);
    }
    // block 2 zeroed in every layer's K and V, block 3 (its copy) not; the same bytes both ways
    const block = each.caches[0].length / MODEL_OPTIONS.numBlocks;
    for (let c = 0; c < each.caches.length; c++) {
      assert.ok(each.caches[c].subarray(2 * block, 3 * block).every((x) => x === 0));
      assert.ok(each.caches[c].subarray(3 * block, 4 * block).some((x) => x !== 0));
      assert.equal(arena.caches[c], each.caches[c], `${fixture} cache ${c}`);
    }
  }
});

test("by default the weights go in arenas and the KV cache a buffer a layer's K and V", async () => {
  const gpu = await sharedGpu();
  const model = await GpuModel.load(gpu, dirs["tiny-mixtral"], { dtype: "f32", ...MODEL_OPTIONS });
  try {
    assert.is(model.weights.placement, "arena");
    assert.is(model.weights.bufferCount, 1);
    assert.is(model.kv.placement, "each");
  } finally {
    model.destroy();
  }
});

test("an unknown weightPlacement is refused by name", async () => {
  const gpu = await sharedGpu();
  const err = await GpuModel.load(gpu, dirs["tiny-qwen3"], {
    dtype: "f32",
    ...MODEL_OPTIONS,
    weightPlacement: "pages" as "each",
  }).then(() => null, (e: Error) => e);
  assert.ok(err instanceof ModelOptionError, String(err));
  assert.match(err!.message, /weightPlacement: 'pages' is neither each nor arena/);
});

test.run();
