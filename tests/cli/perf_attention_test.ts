/**
 * perf-attention on the present adapter at tiny points: every supported decode variant of
 * each storage type is timed, counts the KV bytes of every context key, and its output
 * matches the CPU reference before it is timed; bad points and variants are usage errors.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { Gpu } from "../../src/gpu/device.ts";
import { unsupportedReason } from "../../kernels/kernel.ts";
import * as decode from "../../kernels/paged_attention_decode.ts";
import { UsageError } from "../../src/cli/args.ts";
import {
  benchAttention,
  CHECK_TOLERANCE,
  compareToReference,
  parsePoints,
  type PerfAttentionOptions,
  selectVariants,
} from "../../src/cli/perf_attention.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { runTask } from "./cli_run.ts";

// 2 q heads per kv head; 2 x 40 fits one split of 64 (no merge) and two of the tiled forms' 32,
// 2 x 200 takes 4 splits of 64 (7 of 32)
const SHAPE = { blockSize: 16, numQHeads: 4, numKvHeads: 2, headDim: 32 } as const;
const POINTS = [{ batch: 2, ctx: 40 }, { batch: 2, ctx: 200 }];

function options(
  dtype: "f16" | "f32",
  variants: PerfAttentionOptions["variants"],
): PerfAttentionOptions {
  return {
    ...SHAPE,
    points: POINTS,
    variants,
    dtype,
    reps: 2,
    check: true,
    bytesPerSecond: 1e9,
  };
}

for (const dtype of ["f32", "f16"] as const) {
  test(`${dtype} variants are timed at tiny points, count the KV bytes, match the reference`, async () => {
    const gpu = await sharedGpu();
    if (dtype === "f16") assert.ok(gpu.f16, "the adapter has shader-f16");
    const { run, skipped } = selectVariants(gpu, dtype);
    assert.ok(run.some((v) => v.name === `${dtype}-tiled`), "the tiled form runs everywhere");
    assert.ok(run.some((v) => v.name === dtype), "the direct form runs everywhere");
    for (const s of skipped) {
      assert.is(
        s.reason,
        unsupportedReason(gpu, decode.spec.variants.find((v) => v.name === s.variant)!),
      );
    }
    const lines: string[] = [];
    // with the twins that norm q themselves (the tiled form's here), after each point's forms
    const r = await benchAttention(
      gpu,
      { ...options(dtype, run), qk: true },
      (l) => lines.push(l),
    );
    assert.is(r.timing, gpu.timestamps ? "timestamps" : "wall");
    assert.equal(r.skipped, []);
    assert.is(r.rows.length, POINTS.length * (run.length + 1));
    assert.equal(
      r.rows.filter((x) => x.variant.endsWith("+qk")).map((x) => x.variant),
      POINTS.map(() => `${dtype}-tiled+qk`),
    );
    assert.ok(r.rows[run.length].variant.endsWith("+qk"), "a point's twins after its forms");
    const elem = dtype === "f16" ? 2 : 4;
    for (const row of r.rows) {
      const what = `${row.batch}x${row.ctx} ${row.variant}`;
      assert.is(row.check, "ok", `${what}: check error ${row.check_error}`);
      assert.ok(row.check_error! <= CHECK_TOLERANCE, what);
      assert.ok(row.gpu_us! > 0 && row.split_us! > 0, `${what}: ${row.gpu_us} µs`);
      assert.is(row.kv_bytes, row.batch * row.ctx * SHAPE.numKvHeads * SHAPE.headDim * 2 * elem);
      // tiny KV: flagged as possibly read from cache; the model's split plan by default
      assert.is(row.cache_suspect, true);
      // the FMA forms take the model's plan of about 2048 workgroups (DECODE_SPLIT_WORKGROUPS),
      // at least 32 keys a split on the tiled forms and 64 on the others (decodeSplitMinTokens)
      const least = row.variant.includes("-tiled") ? 32 : 64;
      assert.equal(
        [row.split_rule, row.split_workgroups, row.split_wave, row.split_min_tokens],
        ["model", 2048, null, least],
        what,
      );
      assert.is(row.num_splits, Math.ceil(row.ctx / least), what);
      assert.ok(Math.abs(row.gbps! - row.kv_bytes / (row.gpu_us! * 1e3)) < 1e-9 * row.gbps!);
      assert.ok(Math.abs(row.roof_share! - row.gbps!) < 1e-12, "a roof of 1 GB/s");
      assert.ok(row.split_tokens * row.num_splits >= row.ctx, `${what}: splits cover ctx`);
    }
    assert.ok(r.rows.some((x) => x.ctx === 40 && x.num_splits === 1), "one split, no merge");
    assert.ok(r.rows.every((x) => x.ctx !== 200 || x.num_splits > 1), "the merge runs");
    assert.is(lines.length, r.rows.length, "one line per row");
  });
}

test("a split plan asked for is kept apart from the model's: --split-waves and --split-workgroups", async () => {
  const gpu = await sharedGpu();
  const v = decode.spec.variants.find((x) => x.name === "f32-tiled")!;
  const r = await benchAttention(gpu, {
    ...options("f32", [v]),
    points: [POINTS[1]],
    splitPlans: [{ target: 8, minTokens: 16 }, { target: { wave: 4 }, minTokens: 64 }],
  }, () => {});
  assert.equal(
    r.rows.map((x) => [x.split_rule, x.split_workgroups, x.split_wave, x.split_min_tokens]),
    [["asked", 8, null, 16], ["asked", null, 4, 64]],
  );
  // 2 sequences x 2 kv heads: about 8 workgroups are 2 splits (of 112 keys), a wave of 4 one
  assert.equal(r.rows.map((x) => x.num_splits), [2, 1]);
});

test("by default the tensor-core form the model takes for deep steps is measured too, where it runs", () => {
  const tensorCores = {
    f16: true,
    subgroups: true,
    subgroupMinSize: 32,
    subgroupMaxSize: 32,
    subgroupLanesConsecutive: true,
    subgroupMatrixConfigs: [
      { componentType: "f16", resultComponentType: "f32", M: 16, N: 16, K: 16 },
    ],
    limits: { maxComputeInvocationsPerWorkgroup: 1024, maxComputeWorkgroupStorageSize: 49152 },
  } as unknown as Gpu;
  const names = (heads?: { num_q_heads: number; num_kv_heads: number }) =>
    selectVariants(
      tensorCores,
      "f16",
      undefined,
      heads && {
        numQHeads: heads.num_q_heads,
        numKvHeads: heads.num_kv_heads,
        blockSize: 16,
        minSplitTokens: 64,
      },
    ).run.map((v) => v.name);
  // Qwen3-30B-A3B's 8 query heads a kv head: f16-tcdw2h; 16 a kv head: f16-tcdw2
  assert.equal(names(), ["f16-tiled", "f16-tcdw2h", "f16-lanes32", "f16"]);
  assert.equal(names({ num_q_heads: 32, num_kv_heads: 2 }).slice(0, 2), [
    "f16-tiled",
    "f16-tcdw2",
  ]);
  // f32 K/V: no tensor-core form
  assert.not.ok(
    selectVariants(tensorCores, "f32").run.some((v) => v.subgroupMatrix),
    "f32 runs no tensor-core form",
  );
});

test("without timestamp queries the time is host wall per repetition", async () => {
  const gpu = { ...(await sharedGpu()), timestamps: false };
  const v = decode.spec.variants.find((x) => x.name === "f32-tiled")!;
  const r = await benchAttention(gpu, { ...options("f32", [v]), points: [POINTS[1]] }, () => {});
  assert.is(r.timing, "wall");
  assert.is(r.rows.length, 1);
  assert.ok(r.rows[0].gpu_us! > 0);
  assert.is(r.rows[0].check, "ok");
});

test("a point whose caches exceed the binding limit is skipped with its reason", async () => {
  const gpu = await sharedGpu();
  const v = decode.spec.variants.find((x) => x.name === "f32")!;
  // 8 x 131072 keys x 8 kv heads x 128 x f32 = 4.3 GB a cache: above any binding limit
  const r = await benchAttention(gpu, {
    ...options("f32", [v]),
    numQHeads: 32,
    numKvHeads: 8,
    headDim: 128,
    points: [{ batch: 8, ctx: 131072 }],
  }, () => {});
  assert.is(r.rows.length, 0);
  assert.is(r.skipped.length, 1);
  assert.is(r.skipped[0].batch, 8);
  assert.is(r.skipped[0].variant, null);
  assert.match(r.skipped[0].reason, /above maxStorageBufferBindingSize \d+/);
});

test("the check fails an output off beyond f16 tolerance, and any NaN", () => {
  const ref = Float32Array.from([0.5, -1, 0.25, 2]);
  assert.equal(compareToReference(ref, ref), { ok: true, error: 0 });
  const near = Float32Array.from(ref, (x) => x + 2 * 2 ** -12);
  assert.ok(compareToReference(near, ref).ok, "within 2^-10 of max |ref| = 2");
  const off = Float32Array.from(ref);
  off[1] += 2 * 2 ** -9;
  const c = compareToReference(off, ref);
  assert.not.ok(c.ok);
  assert.ok(Math.abs(c.error - 2 ** -9) < 1e-9);
  const nan = Float32Array.from(ref);
  nan[3] = NaN;
  assert.not.ok(compareToReference(nan, ref).ok);
});

test("points parse as BATCHxCTX; a bad one is a usage error naming it", () => {
  assert.equal(parsePoints(["64x8192", " 8x131072"]), [{ batch: 64, ctx: 8192 }, {
    batch: 8,
    ctx: 131072,
  }]);
  for (const bad of ["8by4", "0x16", "8x", "x8", "2x3x4"]) {
    assert.throws(
      () => parsePoints(["2x64", bad]),
      (e: Error) => e instanceof UsageError && e.message.includes(`'${bad}'`),
      bad,
    );
  }
  const r = runTask("perf_attention", ["--points", "64x8192,8by4"]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /--points: '8by4' is not BATCHxCTX/);
});

test("an unknown variant, or one of the other storage type, is a usage error", async () => {
  const gpu = await sharedGpu();
  assert.throws(
    () => selectVariants(gpu, "f16", ["f16-nope"]),
    (e: Error) => e instanceof UsageError && /'f16-nope'.*known: f32, f16/.test(e.message),
  );
  assert.throws(
    () => selectVariants(gpu, "f16", ["f32-tiled"]),
    (e: Error) => e instanceof UsageError && /f32-tiled stores f32/.test(e.message),
  );
});

test.run();
