/**
 * perf-linear: shapes and split counts parse strictly, a variant takes only the shapes it
 * covers, `--splits auto` is the model's split rule, variants the adapter cannot run are skipped
 * with their reason, and a staged form (its subgroup matrices emulated where the adapter has
 * none) and a GEMV form (`--gemv`) are timed over their layers and checked against the CPU
 * reference.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { unsupportedReason, variantByName } from "../../kernels/kernel.ts";
import * as gemmTc from "../../kernels/gemm_tc.ts";
import * as gemv from "../../kernels/gemv.ts";
import { UsageError } from "../../src/cli/args.ts";
import {
  benchLinear,
  CHECK_TOLERANCE,
  gemvShapeReason,
  parseShapes,
  parseSplits,
  selectGemvVariants,
  selectLinearVariants,
  shapeReason,
  splitsFor,
} from "../../src/cli/perf_linear.ts";
import { emulatedVariant } from "../kernels/tc_emulation.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { runTask } from "./cli_run.ts";

test("shapes are MxNxK with n and k multiples of 16; splits are auto or 1-16", () => {
  assert.equal(parseShapes(["64x5120x2048", " 1x16x32"]), [
    { m: 64, n: 5120, k: 2048 },
    { m: 1, n: 16, k: 32 },
  ]);
  for (const bad of ["64x5120", "0x16x16", "64x100x2048", "64x16x40", "axbxc"]) {
    assert.throws(() => parseShapes([bad]), (e: Error) => e instanceof UsageError, bad);
  }
  assert.equal(parseSplits(["auto", "1", "8"]), ["auto", 1, 8]);
  for (const bad of ["0", "17", "2.5", "some"]) {
    assert.throws(() => parseSplits([bad]), (e: Error) => e instanceof UsageError, bad);
  }
});

test("a staged form takes up to 128 rows, in row blocks past its own; a prefill form any", () => {
  const staged = variantByName(gemmTc.spec, "f16-tcs64x4");
  assert.is(shapeReason(staged, { m: 64, n: 5120, k: 2048 }), null);
  assert.is(shapeReason(staged, { m: 128, n: 5120, k: 2048 }), null);
  assert.match(shapeReason(staged, { m: 129, n: 5120, k: 2048 })!, /129 rows .* 128 the staged/);
  assert.match(shapeReason(staged, { m: 64, n: 512, k: 96 })!, /k 96 .* k step 64/);
  const prefill = variantByName(gemmTc.spec, "f16-tcp256x128");
  assert.is(shapeReason(prefill, { m: 2048, n: 5120, k: 2048 }), null);
  // the forms with column groups take several row blocks (the LM head's 128 rows on 16)
  const wide = variantByName(gemmTc.spec, "f16-tcs16x1w128");
  assert.is(shapeReason(wide, { m: 128, n: 151936, k: 2048 }), null);
  assert.match(shapeReason(wide, { m: 16, n: 512, k: 96 })!, /k 96 .* k step 64/);
});

test("auto splits are the model's: toward 2048 workgroups, at least the form's k a split", () => {
  const v = variantByName(gemmTc.spec, "f16-tcs64x4");
  const s = { m: 64, n: 2048, k: 4096 };
  assert.is(
    splitsFor(v, s, "auto"),
    gemmTc.gemmTcSplits(s.m, s.n, s.k, v, 2048, 16, gemmTc.stagedSplitMinK(v) / 16),
  );
  // 64 column blocks: 4 splits of 1024 of k (the several-subgroup forms' least)
  assert.is(splitsFor(v, s, "auto"), 4);
  assert.is(splitsFor(v, s, 2), 2);
});

test("variants this adapter cannot run are skipped with their reason; unknown ones refused", async () => {
  const gpu = await sharedGpu();
  const names = ["f16-tcs64x4", "f16-tcp256x128"];
  const { run, skipped } = selectLinearVariants(gpu, names);
  for (const name of names) {
    const why = unsupportedReason(gpu, variantByName(gemmTc.spec, name));
    if (why) assert.ok(skipped.some((s) => s.variant === name && s.reason === why), name);
    else assert.ok(run.some((v) => v.name === name), name);
  }
  assert.throws(
    () => selectLinearVariants(gpu, ["f16-nope"]),
    (e: Error) => e instanceof UsageError && /'f16-nope' is not a gemm_tc variant/.test(e.message),
  );
});

test("a staged form times its layers, splits and all, and matches the CPU reference", async () => {
  // on any adapter: f16-tcs32x2 with its subgroup matrices emulated (tc_emulation.ts)
  const gpu = await sharedGpu();
  if (!gpu.f16) return; // no shader-f16: the form's storage type cannot run here
  const real = variantByName(gemmTc.spec, "f16-tcs32x2");
  const { variant, remove } = emulatedVariant(gemmTc.spec, real);
  try {
    const lines: string[] = [];
    const shape = { m: 19, n: 48, k: 256 };
    const r = await benchLinear(gpu, {
      shapes: [shape, { m: 129, n: 48, k: 256 }],
      variants: [variant],
      splits: [1, 2],
      layers: 2,
      reps: 1,
      bytesPerSecond: 1e9,
    }, (l) => lines.push(l));
    // 129 rows are more than the staged forms take
    assert.equal(r.skipped.map((s) => s.shape), ["129x48x256"]);
    assert.is(r.rows.length, 2);
    for (const row of r.rows) {
      assert.ok(row.check_error < CHECK_TOLERANCE, `${row.splits} splits: ${row.check_error}`);
      assert.ok(row.us > 0 && row.gemm_us > 0 && row.gbps > 0, JSON.stringify(row));
      assert.is(row.roof_share, row.gbps / 1);
    }
    assert.equal(r.rows.map((x) => [x.splits, x.k_split]), [[1, 256], [2, 128]]);
    // one column block of 32 and a half one, one row block, a z slice a split
    assert.equal(r.rows.map((x) => x.workgroups), [2, 4]);
    assert.is(lines.length, 3);
  } finally {
    remove();
  }
});

test("the task refuses a bad shape with exit 2", () => {
  const r = runTask("perf_linear", ["--shapes", "64x100x2048"]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /--shapes: '64x100x2048' is not MxNxK/);
});

test("a GEMV form times its layers and matches the CPU reference of f32 activations", async () => {
  const gpu = await sharedGpu();
  // the 8-lane forms run wherever subgroups do (lavapipe's are 8 wide)
  const { run, skipped } = selectGemvVariants(gpu, ["f16-dec", "f16-dec8"]);
  assert.equal(run.length + skipped.length, 2);
  assert.throws(
    () => selectGemvVariants(gpu, ["f16-nope"]),
    (e: Error) =>
      e instanceof UsageError && /--gemv: 'f16-nope' is not a gemv variant/.test(e.message),
  );
  if (run.length === 0) return; // no subgroups here: skipped with their reasons above
  const shapes = [{ m: 1, n: 64, k: 256 }, { m: 3, n: 48, k: 128 }];
  const lines: string[] = [];
  const { rows } = await benchLinear(gpu, {
    shapes,
    variants: [],
    gemv: run,
    splits: ["auto"],
    layers: 3,
    reps: 2,
    bytesPerSecond: null,
  }, (l) => lines.push(l));
  assert.is(rows.length, shapes.length * run.length);
  for (const r of rows) {
    assert.is(r.kernel, "gemv");
    assert.is(r.splits, 1);
    assert.ok(r.us > 0 && r.us === r.gemm_us, `${r.variant}: ${r.us} µs`);
    assert.ok(
      r.check_error < CHECK_TOLERANCE,
      `${r.variant} ${r.m}x${r.n}x${r.k}: ${r.check_error}`,
    );
  }
  assert.ok(lines.some((l) => l.includes("gemv f16-dec")), lines.join("\n"));
});

test("a 16-byte-word GEMV form needs k in whole 8-value words", () => {
  const packed = gemv.spec.variants.find((v) => v.name === "f16-dec")!;
  const ww = { ...packed, name: "f16-dec-ww", packed: false, wideWords: true };
  assert.is(gemvShapeReason(packed, { m: 1, n: 16, k: 20 }), null);
  assert.match(gemvShapeReason(ww, { m: 1, n: 16, k: 20 })!, /k 20 .* 8-value words/);
  assert.is(gemvShapeReason(ww, { m: 1, n: 16, k: 24 }), null);
});

test.run();
