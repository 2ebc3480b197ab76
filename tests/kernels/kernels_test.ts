import { test } from "uvu";
import * as assert from "uvu/assert";
import { KERNELS } from "../../kernels/index.ts";
import { supportedVariants } from "../../kernels/kernel.ts";
import { validateCase } from "../../kernels/validate.ts";
import { sharedGpu } from "../shared_gpu.ts";

// Tiny shapes only: the software driver runs on the CPU.
const MAX_BYTES = 300_000;

// Kernels made only of tensor-core forms (gemm_tc, the MoE *_tc) cannot run where the adapter has no f16
// subgroup matrices (lavapipe): they are skipped there, by name, and validated on GPUs
// that have them (`deno task validate`).
const adapter = await sharedGpu();
const needsSubgroupMatrix = (module: (typeof KERNELS)[number]) =>
  module.spec.variants.every((v) => v.subgroupMatrix !== undefined) &&
  supportedVariants(adapter, module.spec).length === 0;

for (const module of KERNELS) {
  const run = needsSubgroupMatrix(module) ? test.skip : test;
  run(
    `${module.spec.name}: every small case matches its CPU reference on every variant`,
    async () => {
      const gpu = await sharedGpu();
      const variants = supportedVariants(gpu, module.spec);
      assert.ok(variants.length > 0, "no variant runs on this adapter");
      let rows = 0;
      for (const variant of variants) {
        for (const kcase of module.cases) {
          if (kcase.bytes(variant) > MAX_BYTES) continue;
          if (kcase.variants && !kcase.variants.includes(variant.name)) continue;
          const row = await validateCase(gpu, module, kcase, variant, { reps: 0 });
          assert.ok(row.pass, `${row.kernel} ${row.case} ${row.variant}: ${row.firstBad}`);
          rows++;
        }
      }
      assert.ok(rows >= 2, `only ${rows} small cases ran`);
    },
  );
}

test("every kernel has a case whose shape is not a multiple of its workgroup", () => {
  for (const module of KERNELS) {
    const odd = module.cases.some((c) =>
      Object.values(c.params).some((v) => Number.isInteger(v) && v > 1 && v % 2 === 1)
    );
    assert.ok(odd, `${module.spec.name} has no odd-sized case`);
  }
});

test.run();
