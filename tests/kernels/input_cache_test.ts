/**
 * validate draws a case's inputs once per storage type: the variants of one dtype get the same
 * arrays, another dtype gets its own (f16-rounded) draw, and the last expected take lets go.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { caseInputs, fingerprint, InputCache } from "../../kernels/case_inputs.ts";
import { kernelByName, KERNELS } from "../../kernels/index.ts";
import { variantByName } from "../../kernels/kernel.ts";

const gemv = kernelByName("gemv");
const kcase = gemv.cases[1];
const f16 = variantByName(gemv.spec, "f16");
const f16sg = variantByName(gemv.spec, "f16-sg");
const f32 = variantByName(gemv.spec, "f32");

test("one draw per case and dtype, released after its last row", () => {
  const cache = new InputCache();
  for (const v of [f32, f16, f16sg]) cache.expect(gemv, kcase, v);
  const a32 = cache.take(gemv, kcase, f32);
  assert.is(cache.held, 0, "f32 had one row: nothing held after it");
  const a = cache.take(gemv, kcase, f16);
  assert.is(cache.held, 1);
  const b = cache.take(gemv, kcase, f16sg);
  assert.is(a, b, "the f16 variants share one draw");
  assert.is(cache.held, 0, "the last f16 row let go");
  assert.not.equal(Array.from(a32.w), Array.from(a.w), "f16 inputs are rounded, f32 are not");
  assert.equal(Array.from(a.w), Array.from(caseInputs(gemv, kcase, f16).w), "same as a fresh draw");
});

test("a take without expect draws fresh and holds nothing", () => {
  const cache = new InputCache();
  const a = cache.take(gemv, kcase, f16);
  assert.ok(a.w.length > 0);
  assert.is(cache.held, 0);
});

test("every kernel's small cases draw the same inputs for variants of one dtype", () => {
  let compared = 0;
  for (const module of KERNELS) {
    for (const dtype of ["f16", "f32"] as const) {
      const variants = module.spec.variants.filter((v) => v.dtype === dtype);
      if (variants.length < 2) continue;
      for (const kcase of module.cases) {
        if (kcase.bytes(variants[0]) > 2e6) continue;
        const prints = variants.map((v) => fingerprint(caseInputs(module, kcase, v)));
        assert.ok(
          prints.every((p) => p === prints[0]),
          `${module.spec.name} ${kcase.label} ${dtype}: inputs depend on the variant`,
        );
        compared++;
      }
    }
  }
  assert.ok(compared > 50, `compared ${compared} cases`);
});

test.run();
