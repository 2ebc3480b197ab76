/**
 * perf-linear: shapes and split counts parse strictly, a variant takes only the shapes it
 * covers, `--splits auto` is the model's split rule, and on an adapter without f16 subgroup
 * matrices (the software driver) every variant is skipped with its reason and the task exits 0.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { unsupportedReason, variantByName } from "../../kernels/kernel.ts";
import * as gemmTc from "../../kernels/gemm_tc.ts";
import { UsageError } from "../../src/cli/args.ts";
import {
  benchLinear,
  parseShapes,
  parseSplits,
  shapeReason,
  splitsFor,
} from "../../src/cli/perf_linear.ts";
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

test("a staged form takes the rows of one row block; a prefill form any rows", () => {
  const staged = variantByName(gemmTc.spec, "f16-tcs64x4");
  assert.is(shapeReason(staged, { m: 64, n: 5120, k: 2048 }), null);
  assert.match(shapeReason(staged, { m: 65, n: 5120, k: 2048 })!, /65 rows .* row block of 64/);
  assert.match(shapeReason(staged, { m: 64, n: 512, k: 96 })!, /k 96 .* k step 64/);
  const prefill = variantByName(gemmTc.spec, "f16-tcp256x128");
  assert.is(shapeReason(prefill, { m: 2048, n: 5120, k: 2048 }), null);
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
  const lines: string[] = [];
  const names = ["f16-tcs64x4", "f16-tcp256x128"];
  const r = await benchLinear(gpu, {
    shapes: [{ m: 64, n: 64, k: 128 }],
    variants: names,
    splits: ["auto"],
    layers: 2,
    reps: 1,
    bytesPerSecond: null,
  }, (l) => lines.push(l));
  for (const name of names) {
    const why = unsupportedReason(gpu, variantByName(gemmTc.spec, name));
    if (why) assert.ok(r.skipped.some((s) => s.variant === name && s.reason === why), name);
  }
  // where subgroup matrices run, each runs and matches the CPU reference
  for (const row of r.rows) assert.ok(row.check_error < 1e-3, `${row.variant} ${row.check_error}`);
  assert.is(r.rows.length + r.skipped.length, names.length);
  let refused: unknown = null;
  await benchLinear(gpu, {
    shapes: [{ m: 64, n: 64, k: 128 }],
    variants: ["f16-nope"],
    splits: ["auto"],
    layers: 1,
    reps: 1,
    bytesPerSecond: null,
  }).catch((e) => refused = e);
  assert.ok(
    refused instanceof UsageError && /'f16-nope' is not a gemm_tc variant/.test(
      (refused as Error).message,
    ),
  );
});

test("the task refuses a bad shape with exit 2", () => {
  const r = runTask("perf_linear", ["--shapes", "64x100x2048"]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /--shapes: '64x100x2048' is not MxNxK/);
});

test.run();
