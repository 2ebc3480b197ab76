import { expertTilesFit } from "../../kernels/expert_tiles.ts";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import { bindingAccess, preludeOf, variantByName } from "../../kernels/kernel.ts";
import * as gateUpTc from "../../kernels/moe_gemm_gate_up_tc.ts";
import * as downTc from "../../kernels/moe_gemm_down_tc.ts";

const stages = [
  { mod: gateUpTc, shader: "moe_gemm_gate_up_tcp.wgsl", columns: 32 },
  { mod: downTc, shader: "moe_gemm_down_tcp.wgsl", columns: 64 },
];

test("the MoE prefill forms: subgroups of 64 x 64 products, operands as 16-byte words", () => {
  const p = { hidden: 2048, inter: 768, max_items: 300 };
  for (const { mod, shader, columns } of stages) {
    const wgsl = readFileSync(new URL(`../../shaders/${shader}`, import.meta.url), "utf8");
    assert.equal([...wgsl.matchAll(/var<workgroup> (\w+)/g)].map((m) => m[1]), ["wg"], shader);
    const width = mod === gateUpTc ? p.inter : p.hidden;
    const forms = [
      ["f16-tcp1", 1, 32, 1, 1],
      ["f16-tcp2", 2, 32, 1, 1],
      ["f16-tcp4", 4, 16, 1, 1],
      ["f16-tcp4x2", 4, 16, 2, 1],
      ["f16-tcp4x2p2", 4, 16, 2, 2],
    ] as const;
    for (const [name, wn, bk, wm, pf] of forms) {
      const v = variantByName(mod.spec, name);
      assert.equal(v.shader, shader);
      // (the down GEMM's forms say whether they write y as f32 or, their -y16 twins, as f16)
      const y16 = mod === downTc ? { Y16: 0 } : {};
      assert.equal(v.consts, { WN: wn, WM: wm, BK: bk, CW: wn * columns, PF: pf, ...y16 }, name);
      if (mod === downTc) {
        const twin = variantByName(downTc.spec, downTc.y16TwinOf(name)!);
        assert.equal(twin.consts, { ...v.consts, Y16: 1 }, twin.name);
        // y16 as 16-byte words in both (the shader writes words)
        for (const form of [v, twin]) {
          assert.match(
            preludeOf(downTc.spec, form),
            /var<storage, read_write> y16: array<vec4<u32>>;/,
          );
        }
      }
      // the rows of a work item it takes: 64 a row group
      assert.is(gateUpTc.moeTcItemRows(v), 64 * wm);
      assert.equal(mod.spec.grid(p, v, {} as never), [width / (v.consts!.CW), 300, 1]);
      const prelude = preludeOf(mod.spec, v);
      // per-subgroup matrix offsets, and the read operands as words
      assert.match(prelude, /diagnostic\(off, chromium.subgroup_matrix_uniformity\)/);
      for (const b of mod.spec.bindings.filter((b) => b.type === "T" && b.access === "read")) {
        const access = bindingAccess(b, v);
        assert.match(prelude, new RegExp(`var<storage, ${access}> ${b.name}: array<vec4<u32>>;`));
      }
    }
  }
  assert.equal(gateUpTc.MOE_TCP_VARIANTS, [
    "f16-tcp1",
    "f16-tcp2",
    "f16-tcp4",
    "f16-tcp4x2",
    "f16-tcp4x2p2",
  ]);
  // the other forms take the dispatch's 64-row items
  assert.is(gateUpTc.moeTcItemRows(variantByName(gateUpTc.spec, "f16-tcs")), 64);
});

test("a prefill form fits a shape whose width its columns divide and whose k its step does", () => {
  const gu = (n: string) => variantByName(gateUpTc.spec, n);
  // Qwen3-30B-A3B (hidden 2048, inter 768) and Mixtral-8x7B (4096, 14336) fit every form
  for (const n of gateUpTc.MOE_TCP_VARIANTS) {
    assert.ok(gateUpTc.moeTcpFits(gu(n), 768, 2048), n);
    assert.ok(gateUpTc.moeTcpFits(variantByName(downTc.spec, n), 2048, 768), n);
    assert.ok(gateUpTc.moeTcpFits(gu(n), 14336, 4096), n);
  }
  // inter 96: 32 columns of tcp1 only; k 48 steps by 16, not 32
  assert.ok(gateUpTc.moeTcpFits(gu("f16-tcp1"), 96, 64));
  assert.not.ok(gateUpTc.moeTcpFits(gu("f16-tcp2"), 96, 64));
  assert.not.ok(gateUpTc.moeTcpFits(gu("f16-tcp1"), 96, 48));
  assert.ok(gateUpTc.moeTcpFits(gu("f16-tcp4"), 128, 48));
  assert.not.ok(gateUpTc.moeTcpFits(gu("f16-tc"), 768, 2048));
  // the validation cases name the forms that fit them (and, for 128-row items, take them)
  for (const c of gateUpTc.cases) {
    const long = c.label.includes("items of 128");
    const fits = gateUpTc.MOE_TCP_VARIANTS.filter((n) =>
      gateUpTc.moeTcpFits(gu(n), c.params.inter, c.params.hidden) &&
      (!long || gateUpTc.moeTcItemRows(gu(n)) >= 128)
    );
    // and the same forms reading the weights in tiles, where the shape is whole tiles
    const tiled = expertTilesFit(c.params.inter, c.params.hidden)
      ? fits.map((n) => `${n}-t16`)
      : [];
    const names = c.variants ?? gateUpTc.spec.variants.map((v) => v.name);
    assert.equal(names.filter((n) => n.startsWith("f16-tcp")), [...fits, ...tiled], c.label);
  }
});

test.run();
