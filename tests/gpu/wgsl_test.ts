import { test } from "uvu";
import * as assert from "uvu/assert";
import { assembleWgsl, compileWgsl, WgslCompileError } from "../../src/gpu/wgsl.ts";
import { getPipeline, type KernelSpec } from "../../kernels/kernel.ts";
import { defineParams } from "../../kernels/params.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("a WGSL compile error names the original file and line, not the assembled one", async () => {
  const gpu = await sharedGpu();
  const source = assembleWgsl([
    { file: "<prelude>", text: "const A: u32 = 1u;\nconst B: u32 = 2u;" },
    { file: "shaders/broken.wgsl:10", text: "fn f() -> u32 {\n  return undefined_name;\n}" },
  ]);
  try {
    await compileWgsl(gpu.device, source, "broken");
    assert.unreachable("compiled");
  } catch (err) {
    assert.instance(err, WgslCompileError);
    assert.match((err as Error).message, /shaders\/broken\.wgsl:11:\d+: .*undefined_name/);
  }
});

test("modules compiled at once each get their own errors", async () => {
  const gpu = await sharedGpu();
  const good = (i: number) =>
    assembleWgsl([{
      file: `good${i}.wgsl`,
      text: `@compute @workgroup_size(1) fn main() { let x: u32 = ${i}u; }`,
    }]);
  const bad = (i: number) =>
    assembleWgsl([{ file: `bad${i}.wgsl`, text: `fn f() -> u32 { return missing_${i}; }` }]);
  const sources = [good(0), bad(1), good(2), bad(3), good(4)];
  const results = await Promise.allSettled(
    sources.map((src, i) => compileWgsl(gpu.device, src, `m${i}`)),
  );
  assert.equal(results.map((r) => r.status), [
    "fulfilled",
    "rejected",
    "fulfilled",
    "rejected",
    "fulfilled",
  ]);
  for (const i of [1, 3]) {
    const err = (results[i] as PromiseRejectedResult).reason as Error;
    assert.instance(err, WgslCompileError);
    assert.match(err.message, new RegExp(`bad${i}\\.wgsl:1:\\d+: .*missing_${i}`));
    assert.not.match(err.message, new RegExp(`missing_${4 - i}`), "another module's error");
  }
});

test("a kernel whose shader file is missing says which file", async () => {
  const gpu = await sharedGpu();
  const spec: KernelSpec<{ n: "u32" }> = {
    name: "missing",
    shader: "does_not_exist.wgsl",
    params: defineParams({ n: "u32" }),
    bindings: [],
    variants: [{ name: "f32", dtype: "f32" }],
    grid: () => [1, 1, 1],
  };
  try {
    await getPipeline(gpu, spec, spec.variants[0]);
    assert.unreachable("built");
  } catch (err) {
    assert.match((err as Error).message, /shaders\/does_not_exist\.wgsl/);
  }
});

test.run();
