/**
 * The staged tensor-core GEMM on any adapter: `f16-tcs16` (one subgroup a workgroup) and
 * `f16-tcs64x4` (one subgroup a row tile, four a workgroup) with their subgroup-matrix
 * operations emulated in workgroup memory (tc_emulation.ts) run gemm_tc's small cases that the
 * staged forms take, against the CPU reference at the kernel's tolerance. This checks the
 * staging, split-K slices, partial row and column blocks and the per-subgroup offsets where
 * lavapipe has no subgroup matrices; `validate` checks the real instructions on a GPU.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import * as gemmTc from "../../kernels/gemm_tc.ts";
import { type Variant, variantByName } from "../../kernels/kernel.ts";
import { validateCase } from "../../kernels/validate.ts";
import { SHADER_DIR } from "../../src/gpu/wgsl.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { emulateSubgroupMatrices } from "./tc_emulation.ts";

/** Cases up to this many bytes (larger ones take minutes emulated). */
const MAX_BYTES = 2 ** 20;

for (const name of ["f16-tcs16", "f16-tcs64x4"]) {
  test(`${name} with emulated subgroup matrices matches the reference on the small staged cases`, async () => {
    const gpu = await sharedGpu();
    if (!gpu.f16) return; // no shader-f16: the variant's storage type cannot run here
    const real = variantByName(gemmTc.spec, name);
    const dir = mkdtempSync(join(tmpdir(), "webfpm-gemm-tcs-emulated-"));
    try {
      const file = join(dir, real.shader!);
      const src = readFileSync(SHADER_DIR + real.shader!, "utf8");
      writeFileSync(file, emulateSubgroupMatrices(src));
      const emulated: Variant = {
        ...real,
        name: `${name}-emulated`,
        subgroupMatrix: undefined,
        perSubgroupMatrices: undefined,
        shader: relative(SHADER_DIR, file),
      };
      const spec = { ...gemmTc.spec, variants: [emulated] };
      const cases = gemmTc.cases.filter((c) => !c.variants && c.bytes(real) <= MAX_BYTES);
      // split-K, accumulate, partial row and column blocks
      assert.ok(cases.some((c) => c.params.k_split < c.params.k), "a split case");
      assert.ok(cases.some((c) => c.params.accumulate === 1), "an accumulating case");
      assert.ok(cases.some((c) => c.params.m % 16 !== 0), "a partial row tile");
      for (const c of cases) {
        const row = await validateCase(gpu, { spec, cases: [c] }, c, emulated, { reps: 0 });
        assert.ok(row.pass, `${c.label}: max |error| ${row.maxAbs}, ${row.bad} bad`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

test.run();
