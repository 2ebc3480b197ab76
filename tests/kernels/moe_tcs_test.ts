import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import { bindingAccess, preludeOf, variantByName } from "../../kernels/kernel.ts";
import * as gateUpTc from "../../kernels/moe_gemm_gate_up_tc.ts";
import * as downTc from "../../kernels/moe_gemm_down_tc.ts";
import { decodeTileFloats, moeTensorCoreForm } from "../../kernels/moe_block.ts";
import { moeMaxWorkItems } from "../../kernels/moe_dispatch.ts";

const stages = [
  { mod: gateUpTc, shader: "moe_gemm_gate_up_tcs.wgsl", columns: 16 },
  { mod: downTc, shader: "moe_gemm_down_tcs.wgsl", columns: 32 },
];

test("gate/up's tensor-core forms declare their weights read_write, down's operands stay read", () => {
  const access = (mod: typeof gateUpTc | typeof downTc, variant: string) =>
    Object.fromEntries(
      mod.spec.bindings.filter((b) => b.type === "T" && b.access === "read").map((
        b,
      ) => [b.name, bindingAccess(b, variantByName(mod.spec, variant))]),
    );
  for (const form of ["f16-tcs", "f16-tcs-t16", "f16-tcp4x2"]) {
    assert.equal(access(gateUpTc, form), { a: "read", w: "read_write" }, form);
    assert.equal(access(downTc, form), { act: "read", w: "read" }, form);
  }
  // the form without wide words keeps the spec's
  assert.equal(access(gateUpTc, "f16-tc"), { a: "read", w: "read" });
});

test("the staged decode forms read their f16 operands as 16-byte words", () => {
  for (const { mod } of stages) {
    const v = variantByName(mod.spec, "f16-tcs");
    const prelude = preludeOf(mod.spec, v);
    const reads = mod.spec.bindings.filter((b) => b.type === "T" && b.access === "read");
    assert.equal(reads.length, 2, mod.spec.name);
    // declared read_write where the form lists them (gate/up's weights), else read
    for (const b of reads) {
      const access = bindingAccess(b, v);
      assert.match(prelude, new RegExp(`var<storage, ${access}> ${b.name}: array<vec4<u32>>;`));
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

test("their sums leave through a storage slot, and the block's slots cover every step they take", () => {
  for (const { shader } of stages) {
    const wgsl = readFileSync(new URL(`../../shaders/${shader}`, import.meta.url), "utf8");
    // no f32 array in workgroup memory: the sums take the `tile` binding (MOE_TC_TILE)
    const wg = /struct Wg \{[^}]*\}/.exec(wgsl)?.[0] ?? "";
    assert.match(wg, /array<f16/, shader);
    assert.not.match(wg, /array<f32/, shader);
    assert.match(wgsl, /subgroupMatrixStore<row_major>\(&tile, slot/, shader);
  }
  for (const mod of [gateUpTc, downTc]) {
    assert.ok(mod.spec.bindings.some((b) => b.name === "tile"), mod.spec.name);
  }
  // Qwen3-30B-A3B and a Mixtral-like shape: every token count the decode forms take, on both
  // GEMMs' grids, fits the scratch the block sizes for them
  const shapes = [
    { hidden: 2048, inter: 768, experts: 128, topK: 8, maxTokens: 8192 },
    { hidden: 4096, inter: 14336, experts: 8, topK: 2, maxTokens: 100 },
  ];
  for (const shape of shapes) {
    const floats = decodeTileFloats(shape, 8, 16, 32, 64);
    let taken = 0;
    for (let t = 1; t <= shape.maxTokens; t++) {
      if (moeTensorCoreForm((t * shape.topK) / shape.experts) !== "tcs") continue;
      taken++;
      const items = moeMaxWorkItems(t * shape.topK, shape.experts, 64);
      for (const [width, columns] of [[shape.inter, 16], [shape.hidden, 32]]) {
        assert.ok(gateUpTc.moeTcTileFloats(width / columns, items) <= floats, `${t} tokens`);
      }
    }
    assert.ok(taken > 0);
  }
  // Qwen3-30B-A3B: 128 tokens at most (8 rows an expert), 143 items, down's 64 column groups, a
  // 16 x 32 tile each
  assert.is(
    decodeTileFloats(
      { hidden: 2048, inter: 768, experts: 128, topK: 8, maxTokens: 256 },
      8,
      16,
      32,
      64,
    ),
    64 * 143 * 512,
  );
});

test.run();
