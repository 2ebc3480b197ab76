import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import {
  cases,
  EMPTY_SPLIT_LSE,
  planDecodeSplits,
  spec,
  tcDecodeReason,
  tcDecodeWorkgroupBytes,
  tcHalfRowsReason,
} from "../../kernels/paged_attention_decode.ts";
import { preludeOf, variantByName } from "../../kernels/kernel.ts";
import { wgStructLayout } from "./wgsl_struct.ts";
import { readShaderSegments } from "../../src/gpu/wgsl.ts";

const h200 = { limits: { maxComputeWorkgroupStorageSize: 49152 } } as never;
const SHADER = "paged_attention_decode_tcdw.wgsl";
const shader = (name: string) =>
  readFileSync(new URL(`../../shaders/${name}`, import.meta.url), "utf8");
const assembled = (name: string) =>
  readShaderSegments(name).map((segment) => segment.text).join("\n");
const tcdw = () => variantByName(spec, "f16-tcdw");
/** Qwen3-30B-A3B's heads, 3 sequences in 2 splits of 512 keys over blocks of 16. */
const QWEN_TWO_SPLITS = {
  num_seqs: 3,
  num_q_heads: 32,
  num_kv_heads: 4,
  head_dim: 128,
  block_size: 16,
  max_blocks: 64,
  split_tokens: 512,
  num_splits: 2,
  scale: 1,
};

test("the tensor-core decode variant: f16 subgroup matrices, one subgroup of 32, 16 keys a step", () => {
  const v = tcdw();
  assert.is(v.dtype, "f16");
  assert.equal(v.subgroupMatrix, { m: 16, n: 16, k: 16 });
  assert.is(v.shader, SHADER);
  assert.is(v.consts!.WG, 32);
  assert.is(v.consts!.HD, 128);
  assert.is(v.consts!.KT, 16);
  assert.not.ok(v.packed);
  // the tensor-core forms: one subgroup, the head's dims split among 2 or 4, and the 2-subgroup
  // form whose softmax takes 8 rows
  assert.equal(spec.variants.filter((x) => x.subgroupMatrix).map((x) => x.name), [
    "f16-tcdw",
    "f16-tcdw2",
    "f16-tcdw4",
    "f16-tcdw2h",
  ]);
});

test("the several-subgroup forms split the head's dims: one workgroup struct, S a subgroup", () => {
  // the form's shader with its libraries (the body is lib/decode_tcdw2_main.wgsl)
  const wgsl = assembled("paged_attention_decode_tcdw2.wgsl");
  for (
    const [name, wg, bytes] of [
      ["f16-tcdw2", 64, 7752],
      ["f16-tcdw4", 128, 10312],
      // S's and P's rows unpadded
      ["f16-tcdw2h", 64, 6984],
    ] as const
  ) {
    const v = variantByName(spec, name);
    assert.is(v.shader, "paged_attention_decode_tcdw2.wgsl");
    assert.is(v.consts!.WG, wg);
    assert.ok(v.wideWords);
    // each subgroup loads matrices at its own offsets
    assert.ok(v.perSubgroupMatrices);
    assert.ok(
      preludeOf(spec, v).includes("diagnostic(off, chromium.subgroup_matrix_uniformity);"),
      name,
    );
    const layout = wgStructLayout(shader("lib/decode_tcdw2_main.wgsl"), v.consts!);
    assert.is(layout.members, 5, `${name}: members of struct Wg`);
    assert.is(layout.bytes, tcDecodeWorkgroupBytes(v), name);
    assert.is(tcDecodeWorkgroupBytes(v), bytes, name);
    // the same params, grid and split plan as f16-tcdw
    assert.equal(spec.grid(QWEN_TWO_SPLITS, v, h200), [4, 2, 3]);
    const lens = Array(64).fill(1024), qwen = { numQHeads: 32, numKvHeads: 4 };
    assert.equal(planDecodeSplits(lens, qwen, v), planDecodeSplits(lens, qwen, tcdw()));
    // no score buffer: splits of up to 4096 keys, where f16-tcdw keeps the others' 512
    const deep = Array(64).fill(8192);
    assert.equal(planDecodeSplits(deep, qwen, v, 3072), { splitTokens: 688, numSplits: 12 });
    assert.equal(planDecodeSplits(deep, qwen, tcdw(), 3072), { splitTokens: 512, numSplits: 16 });
    assert.equal(planDecodeSplits(Array(8).fill(131072), qwen, v, 1).splitTokens, 4096);
  }
  assert.match(wgsl, /@compute @workgroup_size\(WG\)\nfn main/);
  assert.equal([...wgsl.matchAll(/^var<workgroup> (\w+)/gm)].map((m) => m[1]), ["wg"]);
  // its twin with the q/k norm inside keeps its scratch in the struct too
  const qk = assembled("paged_attention_decode_tcdw2_qk.wgsl");
  assert.equal([...qk.matchAll(/^var<workgroup> (\w+)/gm)].map((m) => m[1]), ["wg"]);
  // the softmax adds the subgroups' shares of S
  assert.match(wgsl, /for \(var g = 0u; g < NSG; g\+\+\) \{\s+sc \+= wg\.s_tile\[g \* ROWS \* SS/);
  assert.not.match(wgsl, /subgroupMatrixLoad<[^>]+>[^>]*>\(&[kv]_cache/);
});

test("it binds K/V as 16-byte words and stages them in one workgroup struct, q in registers", () => {
  const v = tcdw();
  assert.ok(v.wideWords);
  assert.not.ok(v.scalarReads);
  const prelude = preludeOf(spec, v);
  for (const b of ["k_cache", "v_cache"]) {
    assert.ok(prelude.includes(`var<storage, read_write> ${b}: array<vec4<u32>>;`), b);
  }
  assert.ok(prelude.includes("var<storage, read> q: array<vec4<f32>>;"));
  const wgsl = shader(v.shader!);
  assert.match(wgsl, /@compute @workgroup_size\(32\)\nfn main/);
  assert.equal([...wgsl.matchAll(/var<workgroup> (\w+)/g)].map((m) => m[1]), ["wg"]);
  const includes = [...wgsl.matchAll(/^\/\/#include "([^"]+)"/gm)].map((m) => m[1]);
  assert.equal(includes, [
    "lib/paged_kv.wgsl",
    "lib/stage_words.wgsl",
    "lib/attention_steps_tc.wgsl",
  ]);
  for (const lib of includes) assert.not.match(shader(lib), /^\s*var<workgroup>/m, lib);
  // no subgroup-matrix load reads storage: every one takes a workgroup array
  assert.not.match(wgsl, /subgroupMatrixLoad<[^>]+>[^>]*>\(&[kv]_cache/);
  const layout = wgStructLayout(wgsl, v.consts!);
  assert.is(layout.members, 4, "members of struct Wg");
  assert.is(layout.bytes, tcDecodeWorkgroupBytes(v));
  assert.is(tcDecodeWorkgroupBytes(v), 6408);
  // q's matrices live in registers: no q array in workgroup memory (on the H200 the form that
  // kept one, 4.3 KB more, was up to 10% slower a decode step)
  assert.not.match(wgsl.slice(wgsl.indexOf("struct Wg"), wgsl.indexOf("var<workgroup>")), /\bq:/);
  // V is staged over K in wg.a (a second 4.3 KB buffer left fewer workgroups an SM)
  assert.match(wgsl, /fn v_at[^}]*\(&wg\.a,/);
});

test("its prelude enables subgroup matrices and binds K/V as words, the rest as the others", () => {
  const prelude = preludeOf(spec, tcdw());
  for (const line of ["enable f16;", "enable subgroups;"]) assert.ok(prelude.includes(line), line);
  assert.ok(prelude.includes("enable chromium_experimental_subgroup_matrix;"));
  assert.ok(prelude.includes("alias T = f16;"));
  assert.ok(prelude.includes("const KT: u32 = 16u;"));
  assert.ok(prelude.includes("const HD: u32 = 128u;"));
  const bindings = [
    "var<uniform> params: Params;",
    "var<storage, read> q: array<vec4<f32>>;",
    // read_write: the H200's driver reads them slower read-only (Variant.readWrite)
    "var<storage, read_write> k_cache: array<vec4<u32>>;",
    "var<storage, read_write> v_cache: array<vec4<u32>>;",
    "var<storage, read> block_tables: array<i32>;",
    "var<storage, read> seq_info: array<i32>;",
    "var<storage, read_write> out: array<vec4<f32>>;",
    "var<storage, read_write> part_o: array<vec4<f32>>;",
    "var<storage, read_write> part_lse: array<f32>;",
  ];
  let last = -1;
  for (const b of bindings) {
    const at = prelude.indexOf(b);
    assert.ok(at > last, `${b} (in binding order)`);
    last = at;
  }
  assert.match(prelude, /split_tokens: u32/);
  // the FMA forms keep K/V as vec4<T>
  assert.ok(
    preludeOf(spec, variantByName(spec, "f16-tiled")).includes(
      "var<storage, read> k_cache: array<vec4<T>>;",
    ),
  );
});

test("it refuses head geometry other than head_dim 128 and up to 16 query heads a kv head, and key steps across blocks", () => {
  const p = QWEN_TWO_SPLITS;
  assert.is(tcDecodeReason(p), null);
  assert.is(tcDecodeReason({ ...p, num_kv_heads: 2 }), null); // G = 16
  assert.is(tcDecodeReason({ ...p, num_kv_heads: 32 }), null); // G = 1
  assert.match(tcDecodeReason({ ...p, head_dim: 64 }) ?? "", /head_dim 64/);
  assert.match(tcDecodeReason({ ...p, num_kv_heads: 3 }) ?? "", /not a multiple/);
  assert.match(
    tcDecodeReason({ ...p, num_kv_heads: 1 }) ?? "",
    /32 query heads per kv head, at most 16/,
  );
  // one split starts at key 0: any length
  assert.is(tcDecodeReason({ ...p, split_tokens: 500, num_splits: 1 }), null);
  const v = tcdw();
  // [kv heads, splits, seqs] like the other forms
  assert.equal(spec.grid(p, v, h200), [4, 2, 3]);
  assert.equal(spec.grid({ ...p, num_kv_heads: 2 }, v, h200), [2, 2, 3]);
  assert.equal(spec.grid({ ...p, block_size: 32, split_tokens: 496 }, v, h200), [4, 2, 3]);
  assert.throws(() => spec.grid({ ...p, head_dim: 64 }, v, h200), /f16-tcdw: head_dim 64/);
  assert.throws(() => spec.grid({ ...p, num_kv_heads: 1 }, v, h200), /at most 16/);
  assert.throws(() => spec.grid({ ...p, block_size: 8 }, v, h200), /block_size 8 is not a/);
  assert.throws(() => spec.grid({ ...p, split_tokens: 500 }, v, h200), /split_tokens 500 is/);
  assert.throws(() => spec.grid({ ...p, split_tokens: 528 }, v, h200), /use planDecodeSplits/);
  const small = { limits: { maxComputeWorkgroupStorageSize: 4096 } } as never;
  assert.throws(
    () => spec.grid(p, v, small),
    /6408 bytes of workgroup memory, the device allows 4096/,
  );
  // the FMA forms still refuse 16 heads a kv head
  assert.throws(() => spec.grid({ ...p, num_kv_heads: 2 }, variantByName(spec, "f16"), h200));
});

test("the split plan is the other forms' (512 keys at most), and takes 16 heads a kv head", () => {
  const f16 = variantByName(spec, "f16-tiled");
  const qwen = { numQHeads: 32, numKvHeads: 4 };
  for (const lens of [Array(64).fill(1024), Array(8).fill(131072), [3, 700, 9000, 17], [50]]) {
    assert.equal(planDecodeSplits(lens, qwen, tcdw()), planDecodeSplits(lens, qwen, f16));
  }
  assert.equal(planDecodeSplits(Array(8).fill(131072), qwen, tcdw()).splitTokens, 512);
  assert.equal(
    planDecodeSplits(Array(8).fill(131072), { numQHeads: 32, numKvHeads: 2 }, tcdw()).splitTokens,
    512,
  );
});

test("whole waves: the fewest waves whose splits fit, each sequence cut into as many splits as they hold", () => {
  const v = variantByName(spec, "f16-tcdw2");
  const qwen = { numQHeads: 32, numKvHeads: 4 };
  const plan = (b: number, ctx: number, wave = 1536) =>
    planDecodeSplits(Array(b).fill(ctx), qwen, v, { wave });
  // one wave: 128 x 4 x 3 = 1536 workgroups, 64 x 4 x 6, 32 x 4 x 12, 8 x 4 x 48
  assert.equal(plan(128, 1024), { splitTokens: 352, numSplits: 3 });
  assert.equal(plan(64, 1024), { splitTokens: 176, numSplits: 6 });
  assert.equal(plan(32, 8192), { splitTokens: 688, numSplits: 12 });
  assert.equal(plan(8, 8192), { splitTokens: 176, numSplits: 47 });
  assert.equal(plan(64, 8192), { splitTokens: 1376, numSplits: 6 });
  assert.equal(plan(8, 131072), { splitTokens: 2736, numSplits: 48 });
  // 16 x 131072: one wave would need 5472 keys a split, past the form's 4096: two waves
  assert.equal(plan(16, 131072), { splitTokens: 2736, numSplits: 48 });
  assert.equal(plan(1, 131072), { splitTokens: 352, numSplits: 373 });
  // the least keys a split still bounds the splits; more waves never loop past it
  assert.equal(plan(1, 1024), { splitTokens: 64, numSplits: 16 });
  assert.equal(planDecodeSplits([40], qwen, v, { wave: 1536 }), { splitTokens: 40, numSplits: 1 });
  assert.equal(
    planDecodeSplits(Array(4).fill(8192), qwen, v, { wave: 1 }, 8192),
    { splitTokens: 4096, numSplits: 2 },
  );
  // mixed lengths: the longest sets the splits, so the workgroups stay within the waves
  const mixed = planDecodeSplits([1024, 100, 3000, 7], qwen, v, { wave: 1536 });
  assert.ok(4 * 4 * mixed.numSplits <= 1536 && mixed.splitTokens * mixed.numSplits >= 3000);
  assert.throws(() => plan(1, 1024, 0), /wave 0/);
});

test("the cases it cannot take list only the other variants; the rest include Qwen3 decode shapes", () => {
  const others = spec.variants.filter((v) => !v.subgroupMatrix).map((v) => v.name);
  const tcCases = cases.filter((c) => !c.variants);
  for (const c of cases) {
    // f16-tcdw2h takes groups of at most 8 query heads a kv head
    const half = tcHalfRowsReason(c.params) === null;
    if (c.params.split_tokens > 512) {
      // past the others' 512 keys a split: the several-subgroup forms alone (up to 1024)
      assert.equal(
        c.variants,
        ["f16-tcdw2", "f16-tcdw4", ...(half ? ["f16-tcdw2h"] : [])],
        c.label,
      );
      for (const v of c.variants!) spec.grid(c.params, variantByName(spec, v), h200);
      assert.throws(() => spec.grid(c.params, tcdw(), h200), /use planDecodeSplits/);
    } else if (tcDecodeReason(c.params) === null) {
      const all = spec.variants.map((v) => v.name);
      assert.equal(
        c.variants,
        half ? undefined : all.filter((n) => n !== "f16-tcdw2h"),
        c.label,
      );
      spec.grid(c.params, tcdw(), h200);
    } else {
      assert.equal(c.variants, others, c.label);
    }
    // the looser tolerance is the tensor-core form's alone
    const fma = c.tolerance(variantByName(spec, "f16-tiled"));
    const tc = c.tolerance(tcdw());
    assert.ok(tc.atol > fma.atol && tc.rtol > fma.rtol, c.label);
  }
  assert.ok(cases.some((c) => c.variants !== undefined));
  const qwen = tcCases.filter((c) =>
    c.params.num_q_heads === 32 && c.params.num_kv_heads === 4 && c.params.head_dim === 128
  );
  const p = qwen.map((c) => c.params);
  assert.ok(p.some((x) => x.num_splits === 1), "one split");
  assert.ok(p.some((x) => x.num_splits > 1), "several splits");
  assert.ok(p.some((x) => x.block_size === 16) && p.some((x) => x.block_size === 32), "blocks");
  // contexts off the 16-key steps (partial last tiles), and a split with no keys
  const contexts = qwen.map((c) => contextsOf(c.label)).flat();
  assert.ok(contexts.some((n) => n % 16 !== 0), "contexts off the steps");
  const empty = qwen.some((c) => {
    const ctx = contextsOf(c.label);
    return c.params.num_splits > 1 &&
      ctx.some((n) => n <= (c.params.num_splits - 1) * c.params.split_tokens);
  });
  assert.ok(empty, "an empty split");
  assert.is(EMPTY_SPLIT_LSE, -1e30);
});

/** The context lengths a case's label names ("ctx 1,17,100" or "N x L"). */
function contextsOf(label: string): number[] {
  const list = /ctx ([\d,]+)/.exec(label);
  if (list) return list[1].split(",").map(Number);
  const rep = /(\d+) x (\d+) \(/.exec(label);
  return rep ? Array(Number(rep[1])).fill(Number(rep[2])) : [];
}

test.run();
