/**
 * The reference pool's workers draw the same inputs and compute the same references as the
 * main thread (f16 rounding included), in request order, and a closed pool leaves the
 * references to the inline path.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ReferencePool } from "../../kernels/reference_pool.ts";
import { kernelByName } from "../../kernels/index.ts";
import { caseInputs, fingerprint } from "../../kernels/case_inputs.ts";
import type { HostArray } from "../../kernels/case.ts";

const JOBS = [
  { kernel: "rmsnorm", variant: "f16" },
  { kernel: "gemm", variant: "f16" },
  { kernel: "moe_gemm_gate_up", variant: "f32" },
  { kernel: "paged_attention", variant: "f16" },
];

function inlineReference(kernel: string, caseIndex: number, variantName: string) {
  const module = kernelByName(kernel);
  const kcase = module.cases[caseIndex];
  const variant = module.spec.variants.find((v) => v.name === variantName)!;
  const inputs = caseInputs(module, kcase, variant);
  return {
    label: kcase.label,
    print: fingerprint(inputs),
    expected: kcase.reference(inputs, variant),
  };
}

function sameArrays(a: Record<string, HostArray>, b: Record<string, HostArray>): boolean {
  const keys = Object.keys(a).sort();
  if (keys.join() !== Object.keys(b).sort().join()) return false;
  return keys.every((k) =>
    a[k].length === b[k].length && a[k].every((x, i) => Object.is(x, b[k][i]))
  );
}

test("workers return the main thread's references, bit for bit, with the inputs' fingerprint", async () => {
  const pool = ReferencePool.create(2);
  assert.ok(pool, "Deno has module workers");
  try {
    const wanted = JOBS.map((j) => ({
      ...j,
      caseIndex: 1,
      ...inlineReference(j.kernel, 1, j.variant),
    }));
    for (const w of wanted) {
      const dtype = kernelByName(w.kernel).spec.variants.find((v) => v.name === w.variant)!.dtype;
      pool!.request({ kernel: w.kernel, caseIndex: 1, variant: w.variant }, w.label, dtype);
    }
    for (const w of wanted) {
      const dtype = kernelByName(w.kernel).spec.variants.find((v) => v.name === w.variant)!.dtype;
      await pool!.ready(w.kernel, w.label, dtype);
      const got = await pool!.take(w.kernel, w.label, dtype);
      assert.ok(got, `${w.kernel}: a reference`);
      assert.is(got!.fingerprint, w.print, `${w.kernel}: same inputs`);
      assert.ok(sameArrays(got!.expected, w.expected), `${w.kernel}: same reference`);
      // Until released a reference can be taken again (variants of one dtype share it).
      assert.ok(await pool!.take(w.kernel, w.label, dtype));
      pool!.release(w.kernel, w.label, dtype);
      assert.is(pool!.take(w.kernel, w.label, dtype), undefined);
    }
  } finally {
    pool!.close();
  }
});

test("rows that fail before reading their reference still free its place in the pool", async () => {
  // One worker, so at most two references run ahead: release two without taking them (their
  // rows failed), and the third still comes back computed, not left queued.
  const pool = ReferencePool.create(1)!;
  try {
    const gemm = kernelByName("gemm");
    for (const i of [0, 1, 2]) {
      pool.request({ kernel: "gemm", caseIndex: i, variant: "f32" }, gemm.cases[i].label, "f32");
    }
    pool.release("gemm", gemm.cases[0].label, "f32");
    pool.release("gemm", gemm.cases[1].label, "f32");
    await pool.ready("gemm", gemm.cases[2].label, "f32");
    const got = await pool.take("gemm", gemm.cases[2].label, "f32");
    assert.is(got?.fingerprint, inlineReference("gemm", 2, "f32").print);
  } finally {
    pool.close();
  }
});

test("an unknown case is an error reply, taken as no reference; a closed pool gives none", async () => {
  const pool = ReferencePool.create(1)!;
  pool.request({ kernel: "gemm", caseIndex: 999, variant: "f16" }, "no such case", "f16");
  assert.is(await pool.take("gemm", "no such case", "f16"), undefined);
  assert.is(pool.take("gemm", "never requested", "f16"), undefined);
  pool.close();
  pool.request({ kernel: "gemm", caseIndex: 0, variant: "f16" }, "after close", "f16");
  assert.is(pool.take("gemm", "after close", "f16"), undefined);
});

test.run();
