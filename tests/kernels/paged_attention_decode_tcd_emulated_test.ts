/**
 * The tensor-core decode attention (`f16-tcd`) on any adapter: its shader with the subgroup-
 * matrix operations emulated in workgroup memory (tc_emulation.ts) runs the kernel's small
 * cases against the CPU reference at the variant's own tolerance. This checks the shader's
 * logic (paged addressing, 16-key tiles, the partial last tile's zeroed V, empty and single
 * splits, the lazy rescale) where lavapipe has no subgroup matrices; the matrix instructions
 * themselves are checked by `validate` on a GPU (README: Validated on an NVIDIA H200).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import * as decode from "../../kernels/paged_attention_decode.ts";
import { type Variant, variantByName } from "../../kernels/kernel.ts";
import { validateCase } from "../../kernels/validate.ts";
import { SHADER_DIR } from "../../src/gpu/wgsl.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { emulateSubgroupMatrices } from "./tc_emulation.ts";

const real = variantByName(decode.spec, "f16-tcd");
/** Cases up to this many bytes (the production-sized ones take minutes emulated). */
const MAX_BYTES = 16 * 2 ** 20;

test("f16-tcd with emulated subgroup matrices matches the reference on the small cases", async () => {
  const gpu = await sharedGpu();
  if (!gpu.f16) return; // no shader-f16: the variant's storage type cannot run here
  const dir = mkdtempSync(join(tmpdir(), "webfpm-tcd-emulated-"));
  try {
    const file = join(dir, "paged_attention_decode_tcd.wgsl");
    writeFileSync(file, emulateSubgroupMatrices(readFileSync(SHADER_DIR + real.shader!, "utf8")));
    const emulated: Variant = {
      ...real,
      name: "f16-tcd-emulated",
      subgroupMatrix: undefined,
      shader: relative(SHADER_DIR, file),
    };
    const spec = { ...decode.spec, variants: [emulated] };
    const cases = decode.cases.filter((c) => !c.variants && c.bytes(real) <= MAX_BYTES);
    // steps crossing no block but tiles past the context, several and single splits, rescales
    assert.ok(cases.length >= 4, cases.map((c) => c.label).join("; "));
    assert.ok(cases.some((c) => /wide scores/.test(c.label)), "the rescaling case");
    for (const c of cases) {
      const kcase = { ...c, tolerance: () => c.tolerance(real) };
      const row = await validateCase(gpu, { spec, cases: [kcase] }, kcase, emulated, { reps: 0 });
      assert.ok(row.pass, `${c.label}: max |error| ${row.maxAbs}, ${row.bad} bad`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the emulation leaves no subgroup operation and refuses what it cannot emulate", () => {
  const src = readFileSync(SHADER_DIR + real.shader!, "utf8");
  const out = emulateSubgroupMatrices(src);
  assert.not.match(out.replace(/\/\/.*$/gm, ""), /\bsubgroup/);
  assert.match(out, /fn emu_load_k_cache_f\(/);
  assert.match(out, /fn emu_store_s\(/);
  assert.throws(
    () => emulateSubgroupMatrices(src.replace("subgroupShuffleXor(mt, 1u)", "subgroupAdd(mt)")),
    /subgroupAdd is not emulated/,
  );
});

test.run();
