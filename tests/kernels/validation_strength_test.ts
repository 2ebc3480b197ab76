/**
 * The validation catches the bugs it is there for: each test runs a deliberately wrong copy of
 * a kernel's shader (written under tmp/mutants/, the real shaders untouched) through
 * validateCase on the kernel's own small cases, and needs at least one of them to fail, while
 * the real shader passes them all. (Each of these mutants passed every small case once: a
 * temperature ignored, eps dropped, an f32 output off by f16's rounding step, a dropped
 * assignment's row left unwritten.)
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import type { HostArray, KernelCase, KernelModule } from "../../kernels/case.ts";
import { caseInputs } from "../../kernels/case_inputs.ts";
import { type KernelSpec, supportedVariants, type Variant } from "../../kernels/kernel.ts";
import type { ParamFields } from "../../kernels/params.ts";
import { validateCase, type ValidationRow } from "../../kernels/validate.ts";
import * as sample from "../../kernels/sample.ts";
import * as rmsnorm from "../../kernels/rmsnorm.ts";
import * as qk from "../../kernels/qk_norm_rope_cache.ts";
import * as dispatch from "../../kernels/moe_dispatch.ts";
import { readShaderSegments, SHADER_DIR } from "../../src/gpu/wgsl.ts";
import { sharedGpu } from "../shared_gpu.ts";

const SCRATCH = join(SHADER_DIR, "..", "tmp", "mutants");

/** Cases small enough for the software driver (as kernels_test.ts). */
const MAX_BYTES = 1_000_000;

/**
 * The kernel with its shader replaced by a mutated copy (includes expanded, every `from`
 * replaced by `to`; each must occur). The spec gets a name of its own (pipeline and reference
 * caches), the inputs stay the real kernel's (passed explicitly below).
 */
function mutant<F extends ParamFields>(
  spec: KernelSpec<F>,
  tag: string,
  edits: readonly [string, string][],
): KernelSpec<F> {
  mkdirSync(SCRATCH, { recursive: true });
  const byShader = new Map<string, string>();
  for (const v of spec.variants) {
    const shader = v.shader ?? spec.shader;
    if (byShader.has(shader)) continue;
    let text = readShaderSegments(shader).map((s) => s.text).join("\n");
    for (const [from, to] of edits) {
      assert.ok(text.includes(from), `${shader}: '${from}' not found`);
      text = text.split(from).join(to);
    }
    const file = join(SCRATCH, `${spec.name}-${tag}-${shader.replaceAll("/", "_")}`);
    writeFileSync(file, text);
    byShader.set(shader, relative(SHADER_DIR, file));
  }
  return {
    ...spec,
    name: `${spec.name}~${tag}`,
    variants: spec.variants.map((v) => ({ ...v, shader: byShader.get(v.shader ?? spec.shader)! })),
  };
}

/** One case on one variant of `spec`, with the inputs the real kernel's validation draws. */
async function run<F extends ParamFields>(
  real: KernelModule<F>,
  spec: KernelSpec<F>,
  kcase: KernelCase<F>,
  variant: Variant,
  inputs?: Record<string, HostArray>,
): Promise<ValidationRow> {
  const gpu = await sharedGpu();
  const v = spec.variants.find((x) => x.name === variant.name)!;
  return await validateCase(gpu, { spec, cases: [kcase] }, kcase, v, {
    reps: 0,
    inputs: inputs ?? caseInputs(real, kcase, variant),
  });
}

/** Every small case of the real table on every supported variant: the rows of `spec`. */
async function runTable<F extends ParamFields>(
  real: KernelModule<F>,
  spec: KernelSpec<F>,
  keep: (v: Variant) => boolean,
  maxBytes = MAX_BYTES,
): Promise<ValidationRow[]> {
  const gpu = await sharedGpu();
  const rows: ValidationRow[] = [];
  for (const variant of supportedVariants(gpu, real.spec).filter(keep)) {
    for (const kcase of real.cases) {
      if (kcase.bytes(variant) > maxBytes) continue;
      if (kcase.variants && !kcase.variants.includes(variant.name)) continue;
      rows.push(await run(real, spec, kcase, variant));
    }
  }
  return rows;
}

const describe = (rows: ValidationRow[]) =>
  rows.map((r) => `${r.case} ${r.variant}: ${r.pass ? "pass" : "FAIL"} maxAbs ${r.maxAbs}`)
    .join("\n");

/** The mutant fails at least one small case, and the real shader passes every one. */
async function caught<F extends ParamFields>(
  real: KernelModule<F>,
  wrong: KernelSpec<F>,
  only?: (v: Variant) => boolean,
): Promise<void> {
  const keep = only ?? (() => true);
  const good = await runTable(real, real.spec, keep);
  const bad = await runTable(real, wrong, keep);
  assert.ok(good.length > 0 && good.length === bad.length, `${good.length} / ${bad.length} rows`);
  assert.ok(good.every((r) => r.pass), describe(good));
  assert.ok(bad.some((r) => !r.pass), `the mutant passed every case:\n${describe(bad)}`);
}

test("sample: a kernel that ignores the temperature fails a small case", async () => {
  await caught(
    sample,
    mutant(sample.spec, "no-temperature", [
      ["v = v / temperature + gumbel(key, j);", "v = v + gumbel(key, j);"],
      ["v = v / temperature + gumbel(key, i);", "v = v + gumbel(key, i);"],
    ]),
  );
});

test("rmsnorm: a kernel that drops eps fails a small case", async () => {
  await caught(
    rmsnorm,
    mutant(rmsnorm.spec, "no-eps", [
      ["inverseSqrt(total / f32(params.n) + params.eps)", "inverseSqrt(total / f32(params.n))"],
    ]),
  );
});

// each shader form of qk_norm_rope_cache on its own (the mutants edit both): several heads a
// workgroup (f32, f16) and one (f32-wg64, f16-wg64)
const qkForms = [...new Set(qk.spec.variants.map((v) => v.shader ?? qk.spec.shader))];

for (const form of qkForms) {
  const ofForm = (v: Variant) => (v.shader ?? qk.spec.shader) === form;

  test(`qk_norm_rope_cache ${form}: a kernel that drops eps fails a small case`, async () => {
    await caught(
      qk,
      mutant(qk.spec, "no-eps", [
        ["inverseSqrt(total / f32(hd) + params.eps)", "inverseSqrt(total / f32(hd))"],
      ]),
      ofForm,
    );
  });

  test(`qk_norm_rope_cache ${form} f16: q_out (f32) off by f16's rounding step fails a small case`, async () => {
    // (f32(f16(y)) would be the literal bug, but lavapipe does not round f16 in registers)
    await caught(
      qk,
      mutant(qk.spec, "q-f16", [
        ["q_out[dst + i] = y1;", "q_out[dst + i] = y1 * (1.0 + 1.0 / 2048.0);"],
        ["q_out[dst + i + half] = y2;", "q_out[dst + i + half] = y2 * (1.0 + 1.0 / 2048.0);"],
      ]),
      (v) => ofForm(v) && v.dtype === "f16",
    );
  });
}

test("moe_dispatch: a kernel that leaves a dropped assignment's row_of unwritten fails a small case", async () => {
  await caught(
    dispatch,
    mutant(dispatch.spec, "no-sentinel", [["row_of[i] = NO_EXPERT;", "/* not written */"]]),
  );
});

test.run();
