import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import { preludeOf, variantByName } from "../../kernels/kernel.ts";
import * as gateUpTc from "../../kernels/moe_gemm_gate_up_tc.ts";
import * as downTc from "../../kernels/moe_gemm_down_tc.ts";
import { moeTensorCoreForm } from "../../kernels/moe_block.ts";

const stages = [
  { mod: gateUpTc, shader: "moe_gemm_gate_up_tcs.wgsl", columns: 16 },
  { mod: downTc, shader: "moe_gemm_down_tcs.wgsl", columns: 32 },
];

test("the staged decode forms read their f16 operands as 16-byte words", () => {
  for (const { mod } of stages) {
    const v = variantByName(mod.spec, "f16-tcs");
    const prelude = preludeOf(mod.spec, v);
    const reads = mod.spec.bindings.filter((b) => b.type === "T" && b.access === "read");
    assert.equal(reads.length, 2, mod.spec.name);
    for (const b of reads) {
      assert.match(prelude, new RegExp(`var<storage, read> ${b.name}: array<vec4<u32>>;`));
    }
    // the written binding keeps its type, and the prefill form its T bindings
    const out = mod.spec.bindings.find((b) => b.access === "read_write")!;
    assert.match(prelude, new RegExp(`read_write> ${out.name}: array<${out.type}>;`));
    const prefill = preludeOf(mod.spec, variantByName(mod.spec, "f16-tc"));
    for (const b of reads) {
      assert.match(prefill, new RegExp(`var<storage, read> ${b.name}: array<T>;`));
    }
  }
  assert.throws(
    () => preludeOf(gateUpTc.spec, { name: "x", dtype: "f32", wideWords: true }),
    /wide-words variant stores f16/,
  );
});

test("their grids take CW columns a workgroup, and each declares one workgroup struct", () => {
  const p = { hidden: 2048, inter: 768, max_items: 200 };
  for (const { mod, shader, columns } of stages) {
    const v = variantByName(mod.spec, "f16-tcs");
    const width = mod === gateUpTc ? p.inter : p.hidden;
    assert.equal(mod.spec.grid(p, v, {} as never), [width / columns, 200, 1], mod.spec.name);
    const wgsl = readFileSync(new URL(`../../shaders/${shader}`, import.meta.url), "utf8");
    // separate workgroup variables beside subgroup-matrix stores read wrong values on the
    // H200's driver (see paged_attention_tc.wgsl): one struct
    assert.equal([...wgsl.matchAll(/var<workgroup> (\w+)/g)].map((m) => m[1]), ["wg"], shader);
  }
});

test("steps take the staged decode forms above 2 rows an expert, the prefill form above 8", () => {
  // Qwen3-30B-A3B: 128 experts, top 8, so rows an expert = tokens / 16
  const form = (tokens: number, min?: number, decodeMin?: number) =>
    moeTensorCoreForm((tokens * 8) / 128, min, decodeMin);
  assert.equal([1, 8, 32, 33, 64, 128, 129, 2048].map((t) => form(t)), [
    null,
    null,
    null,
    "tcs",
    "tcs",
    "tcs",
    "tc",
    "tc",
  ]);
  // -1 keeps decode steps on the lane-group forms; 0 rows an expert is no step
  assert.equal([form(64, undefined, -1), form(2048, undefined, -1)], [null, "tc"]);
  assert.is(form(0), null);
  // no tensor cores at all
  assert.equal([form(64, 0), form(2048, 0)], [null, null]);
  // 0 sends every step with rows to the decode forms up to the prefill threshold
  assert.equal([form(1, undefined, 0), form(128, undefined, 0)], ["tcs", "tcs"]);
});

test.run();
