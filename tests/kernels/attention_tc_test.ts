import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import {
  cases,
  o16TwinOf,
  q16TwinOf,
  spec,
  tcGeometryReason,
  tileRows,
  workgroupBytes,
} from "../../kernels/paged_attention_tc.ts";
import { attentionCase, spec as fmaSpec } from "../../kernels/paged_attention.ts";
import { variantByName } from "../../kernels/kernel.ts";
import { Rng } from "../../src/util/rng.ts";
import { wgStructLayout } from "./wgsl_struct.ts";

const geometry = { num_q_heads: 32, num_kv_heads: 4, head_dim: 128, block_size: 16 };
const h200 = { limits: { maxComputeWorkgroupStorageSize: 49152 } } as never;

test("the tensor-core attention takes head_dim 128, blocks of 16k slots, up to 16 heads a kv head", () => {
  assert.is(tcGeometryReason(geometry), null);
  assert.is(tcGeometryReason({ ...geometry, block_size: 32 }), null);
  assert.match(tcGeometryReason({ ...geometry, head_dim: 64 }) ?? "", /head_dim 64/);
  assert.match(tcGeometryReason({ ...geometry, block_size: 8 }) ?? "", /block_size 8 /);
  assert.match(tcGeometryReason({ ...geometry, num_kv_heads: 3 }) ?? "", /not a multiple/);
  assert.match(
    tcGeometryReason({ ...geometry, num_q_heads: 32, num_kv_heads: 1 }) ?? "",
    /32 query heads per kv head, at most 16/,
  );
});

/** The variant of KT key tiles a step. */
const tcVariant = (kt: number) => variantByName(spec, kt === 1 ? "f16-tc" : "f16-tc2");

test("its workgroup memory is what the shader declares, and the grid checks the device's", () => {
  // the sizes of the shader's workgroup arrays at KT = 1 and 2, HD = 128
  assert.is(workgroupBytes(variantByName(spec, "f16-tc")), 6152);
  assert.is(workgroupBytes(variantByName(spec, "f16-tc2")), 12040);
  const wgsl = readFileSync(
    new URL("../../shaders/paged_attention_tc.wgsl", import.meta.url),
    "utf8",
  );
  // one workgroup variable, the struct (separate ones computed wrong values on the H200)
  assert.equal([...wgsl.matchAll(/var<workgroup> (\w+)/g)].map((m) => m[1]), ["wg"]);
  for (const kt of [1, 2]) {
    assert.is(
      wgStructLayout(wgsl, { KT: kt, HD: 128 }).bytes,
      workgroupBytes(tcVariant(kt)),
      `KT ${kt}`,
    );
  }
  // the staged form stages q, K and V in one buffer: f16-tc's workgroup memory, one struct
  const staged = readFileSync(
    new URL("../../shaders/paged_attention_tcs.wgsl", import.meta.url),
    "utf8",
  );
  assert.equal([...staged.matchAll(/var<workgroup> (\w+)/g)].map((m) => m[1]), ["wg"]);
  assert.is(wgStructLayout(staged, { KT: 1, HD: 128, RT: 1 }).bytes, 6152);
  assert.is(workgroupBytes(variantByName(spec, "f16-tcs")), 6152);
  // with RT subgroups a workgroup: q of 16 RT rows in RT passes through a step's 16 keys of K
  // and V, and each subgroup's S and P
  for (const rt of [2, 4]) {
    const v = variantByName(spec, `f16-tcs${rt}`);
    assert.is(tileRows(v), 16 * rt);
    assert.is(wgStructLayout(staged, { KT: 1, HD: 128, RT: rt }).bytes, workgroupBytes(v));
  }
  assert.is(workgroupBytes(variantByName(spec, "f16-tcs2")), 7944);
  assert.is(workgroupBytes(variantByName(spec, "f16-tcs4")), 11528);
  // no subgroup-matrix load reads storage
  assert.not.match(staged, /subgroupMatrixLoad<[^>]+>[^>]*>\(&[kv]_cache/);
  const p = {
    num_seqs: 2,
    ...geometry,
    max_blocks: 4,
    max_query_len: 9,
    scale: 1 / Math.sqrt(128),
  };
  // 16 rows = 2 tokens x 8 heads a workgroup: 5 q tiles for 9 tokens
  assert.equal(spec.grid(p, variantByName(spec, "f16-tc"), h200), [5, 2, 4]);
  // 64 rows = 8 tokens x 8 heads a workgroup of f16-tcs4: 2 q tiles for 9 tokens
  assert.equal(spec.grid(p, variantByName(spec, "f16-tcs4"), h200), [2, 2, 4]);
  const small = { limits: { maxComputeWorkgroupStorageSize: 8192 } } as never;
  assert.throws(() => spec.grid(p, variantByName(spec, "f16-tc2"), small), /12040 bytes.*8192/);
  assert.throws(
    () => spec.grid({ ...p, head_dim: 64 }, variantByName(spec, "f16-tc"), h200),
    /paged_attention_tc\/f16-tc: head_dim 64/,
  );
});

test("it shares paged_attention's params and binding names (the model binds either), and adds out16 and q16", () => {
  assert.is(spec.params, fmaSpec.params);
  assert.equal(spec.bindings.map((b) => b.name), [
    ...fmaSpec.bindings.map((b) => b.name),
    "out16",
    "q16",
  ]);
  // each staged form has a twin writing O as f16, and its cases split by which output is written
  for (const name of ["f16-tcs", "f16-tcs2", "f16-tcs4"]) {
    assert.is(o16TwinOf(name), `${name}-o16`);
    assert.is(variantByName(spec, `${name}-o16`).consts!.O16, 1);
    assert.is(variantByName(spec, name).consts!.O16, 0);
  }
  assert.is(o16TwinOf("f16-tc"), null);
  // the default alone has twins reading q as f16 (with O in f32 and in f16)
  assert.is(q16TwinOf("f16-tcs4"), "f16-tcs4-q16");
  assert.is(o16TwinOf("f16-tcs4-q16"), "f16-tcs4-q16-o16");
  assert.is(q16TwinOf("f16-tcs2"), null);
  assert.is(variantByName(spec, "f16-tcs4-q16-o16").consts!.Q16, 1);
  assert.is(variantByName(spec, "f16-tcs4-o16").consts!.Q16, 0);
  for (const c of cases) {
    const twins = c.variants!.filter((n) => n.endsWith("-o16"));
    assert.ok(twins.length === 0 || twins.length === c.variants!.length, c.label);
    // both outputs compared: the one a form does not write must keep its sentinel
    assert.equal(Object.keys(c.outputs).sort(), ["out", "out16"], c.label);
    const q16 = c.variants!.filter((n) => n.includes("-q16"));
    assert.ok(q16.length === 0 || q16.length === c.variants!.length, c.label);
    assert.is(c.label.includes(", q as f16"), q16.length > 0, c.label);
  }
  assert.is(cases.filter((c) => c.label.includes(", O as f16")).length, cases.length / 2);
  assert.is(cases.filter((c) => c.label.includes(", q as f16")).length, cases.length / 2);
});

test("its reference rounds q * scale to f16: close to the exact one, not equal", () => {
  const shape = {
    label: "1 seq q=9 prefix 20",
    numQHeads: 8,
    numKvHeads: 2,
    headDim: 128,
    blockSize: 16,
    lens: [{ prefix: 20, query: 9 }],
  };
  const tol = { atol: 2e-3, rtol: 2e-3 };
  const tc = attentionCase(shape, { qF16: true, tolerance: tol });
  const fma = attentionCase(shape);
  const v = variantByName(spec, "f16-tc");
  const inputs = tc.inputs(Rng.fromSeed(7), v);
  const rounded = tc.reference(inputs, v).out as Float32Array;
  const exact = fma.reference(inputs, v).out as Float32Array;
  let diff = 0;
  for (let i = 0; i < exact.length; i++) diff = Math.max(diff, Math.abs(rounded[i] - exact[i]));
  assert.ok(diff > 0 && diff < 1e-3, `q rounding moved the output by ${diff}`);
  assert.equal(tc.tolerance(v), tol);
  // the case table's shapes all fit the variants
  for (const c of cases) assert.is(tcGeometryReason(c.params), null, c.label);
});

test.run();
