/**
 * validate draws a case's inputs once per inputs kind (storage type, and the bindings a variant
 * reads as f32): the variants of one kind get the same arrays, another gets its own draw, and
 * the last expected take lets go.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { caseInputs, fingerprint, InputCache, inputsKind } from "../../kernels/case_inputs.ts";
import type { KernelCase, KernelModule } from "../../kernels/case.ts";
import { kernelByName, KERNELS } from "../../kernels/index.ts";
import type { ParamFields } from "../../kernels/params.ts";
import { type Variant, variantByName } from "../../kernels/kernel.ts";
import * as gemmTc from "../../kernels/gemm_tc.ts";
import { roundToF16InPlace } from "../../src/util/f16.ts";

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

/**
 * Every kernel's cases of at most `maxBytes` with each inputs kind that two or more of its
 * variants share: `check` gets them (the variants of that kind); returns how many it got.
 */
function eachSharedKind(
  maxBytes: number,
  check: (module: KernelModule, kcase: KernelCase<ParamFields>, variants: Variant[]) => void,
): number {
  let compared = 0;
  for (const module of KERNELS) {
    const kinds = new Map<string, Variant[]>();
    for (const v of module.spec.variants) {
      kinds.set(inputsKind(v), [...(kinds.get(inputsKind(v)) ?? []), v]);
    }
    for (const variants of kinds.values()) {
      if (variants.length < 2) continue;
      for (const kcase of module.cases) {
        if (kcase.bytes(variants[0]) > maxBytes) continue;
        check(module, kcase, variants);
        compared++;
      }
    }
  }
  return compared;
}

test("every kernel's small cases draw the same inputs for variants of one inputs kind", () => {
  const compared = eachSharedKind(2e6, (module, kcase, variants) => {
    const prints = variants.map((v) => fingerprint(caseInputs(module, kcase, v)));
    assert.ok(
      prints.every((p) => p === prints[0]),
      `${module.spec.name} ${kcase.label} ${inputsKind(variants[0])}: inputs depend on the variant`,
    );
  });
  assert.ok(compared > 50, `compared ${compared} cases`);
});

test("every kernel's small cases give one reference to the variants of one inputs kind", () => {
  // validate computes a case's reference once per inputs kind and hands it to each of its
  // variants: gemm's reference once rounded a for its subgroup-matrix variant, which then
  // failed on the H200 against the plain f16 variant's cached reference
  const compared = eachSharedKind(2e5, (module, kcase, variants) => {
    const inputs = caseInputs(module, kcase, variants[0]);
    const prints = variants.map((v) => fingerprint(kcase.reference(inputs, v)));
    const odd = variants.filter((_, i) => prints[i] !== prints[0]).map((v) => v.name);
    assert.equal(
      odd,
      [],
      `${module.spec.name} ${kcase.label} ${inputsKind(variants[0])}: reference differs for ${
        odd.join(", ")
      }`,
    );
  });
  assert.ok(compared > 50, `compared ${compared} cases`);
});

test("an -a32 twin draws its form's inputs, its f32 binding left unrounded", () => {
  const base = variantByName(gemmTc.spec, "f16-tcs16");
  const twin = variantByName(gemmTc.spec, "f16-tcs16-a32");
  assert.is(inputsKind(base), "f16");
  assert.is(inputsKind(twin), "f16+f32:a");
  const kcase = gemmTc.cases.find((c) => c.label === "m=9 n=80 k=128")!;
  const mine = caseInputs(gemmTc, kcase, twin), theirs = caseInputs(gemmTc, kcase, base);
  assert.equal(mine.b, theirs.b);
  const a = mine.a as Float32Array;
  assert.ok(a.some((x) => Math.fround(x) !== roundToF16InPlace(new Float32Array([x]))[0]));
  assert.equal(roundToF16InPlace(new Float32Array(a)), theirs.a);
});

test.run();
