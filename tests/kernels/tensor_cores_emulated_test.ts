/**
 * The tensor-core kernels on any adapter: each kernel's default tensor-core forms run their
 * small cases with the subgroup-matrix operations emulated in workgroup memory
 * (tc_emulation.ts), against the CPU reference at the variant's own tolerance. This checks the
 * shaders' logic (addressing, staging, masking, split-K, per-subgroup offsets, the attention
 * softmax and its lazy rescale) where lavapipe has no subgroup matrices; `validate` checks the
 * matrix instructions themselves on a GPU that has them (README: Validated on an NVIDIA H200).
 * Each form costs lavapipe 20-90 s, mostly compiling the emulated shader.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import type { KernelCase } from "../../kernels/case.ts";
import { type KernelSpec, variantByName } from "../../kernels/kernel.ts";
import type { ParamFields } from "../../kernels/params.ts";
import { validateCase } from "../../kernels/validate.ts";
import * as gemmTc from "../../kernels/gemm_tc.ts";
import * as gateUpTc from "../../kernels/moe_gemm_gate_up_tc.ts";
import * as downTc from "../../kernels/moe_gemm_down_tc.ts";
import * as attentionTc from "../../kernels/paged_attention_tc.ts";
import * as decode from "../../kernels/paged_attention_decode.ts";
import * as decodeQk from "../../kernels/paged_attention_decode_qk.ts";
import { SHADER_DIR } from "../../src/gpu/wgsl.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { emulatedVariant, emulateSubgroupMatrices } from "./tc_emulation.ts";
import * as qkNorm from "../../kernels/qk_norm_rope_cache.ts";
import { ropeTable } from "../../kernels/rope.ts";
import { Rng } from "../../src/util/rng.ts";
import { dispatchOnce } from "./dispatch_once.ts";

interface Module {
  readonly spec: KernelSpec<ParamFields>;
  readonly cases: readonly KernelCase<ParamFields>[];
}

/** Cases up to this many bytes (production-sized ones take minutes emulated). */
const MAX_BYTES = 2 ** 20;

/**
 * The forms the model runs by default, or, where a default form's workgroup memory is above
 * lavapipe's 32 KB, a smaller form of its shader: f16-tcs64x4 for f16-tcs128x8 (39 KB
 * emulated), f16-tcp128x64 for the prefill forms f16-tcp128x128 (45 KB) and f16-tcp256x128,
 * the MoE f16-tcp2 at 16 of k a step for f16-tcp4 (39 KB). Prefill attention runs its default
 * f16-tcs2, the one-subgroup f16-tcs it falls back to and f16-tcs4; decode attention its four
 * forms and the deep form's twin that norms q itself (paged_attention_decode_qk).
 * The f32-input twins (-a32) of the linears' decode forms run beside them.
 */
const FORMS: readonly [string, Module, string, number?, Record<string, number>?][] = [
  ["gemm_tc", gemmTc as unknown as Module, "f16-tc16"],
  ["gemm_tc", gemmTc as unknown as Module, "f16-tcs16"],
  ["gemm_tc", gemmTc as unknown as Module, "f16-tcs64x4"],
  // the LM head's forms with column groups
  ["gemm_tc", gemmTc as unknown as Module, "f16-tcs16x1w128"],
  ["gemm_tc", gemmTc as unknown as Module, "f16-tcs32x2w64"],
  ["gemm_tc", gemmTc as unknown as Module, "f16-tcp128x64"],
  // the prefill form holding two steps' words in registers (PF 2), at 128 x 64
  ["gemm_tc", gemmTc as unknown as Module, "f16-tcp256x128p2", MAX_BYTES, {
    WM: 2,
    WN: 1,
    TM: 128,
    CW: 64,
  }],
  // the f32-input twins (no cast_f16 before them)
  ["gemm_tc", gemmTc as unknown as Module, "f16-tcs16-a32"],
  ["gemm_tc", gemmTc as unknown as Module, "f16-tcs64x4-a32"],
  ["moe_gemm_gate_up_tc", gateUpTc as unknown as Module, "f16-tcs"],
  ["moe_gemm_down_tc", downTc as unknown as Module, "f16-tcs"],
  // the prefill forms' two-subgroup workgroups, at 16 of k a step (emulated at 32 they need
  // more than lavapipe's 32 KB of workgroup memory; the step is a constant of the same shader)
  ["moe_gemm_gate_up_tc", gateUpTc as unknown as Module, "f16-tcp2", MAX_BYTES, { BK: 16 }],
  ["moe_gemm_down_tc", downTc as unknown as Module, "f16-tcp2", MAX_BYTES, { BK: 16 }],
  // the 128-row items' form (f16-tcp4x2, 45 KB) with one column group: both row halves
  ["moe_gemm_gate_up_tc", gateUpTc as unknown as Module, "f16-tcp4x2", MAX_BYTES, {
    WN: 1,
    CW: 32,
  }],
  ["moe_gemm_down_tc", downTc as unknown as Module, "f16-tcp4x2", MAX_BYTES, { WN: 1, CW: 64 }],
  // its twin writing y as f16 (every tile through workgroup memory, one word a lane)
  ["moe_gemm_down_tc", downTc as unknown as Module, "f16-tcp4x2-y16", MAX_BYTES, {
    WN: 1,
    CW: 64,
  }],
  // the 128-row items' form holding two steps' words in registers (PF 2), f32 and f16 y
  ["moe_gemm_gate_up_tc", gateUpTc as unknown as Module, "f16-tcp4x2p2", MAX_BYTES, {
    WN: 1,
    CW: 32,
  }],
  ["moe_gemm_down_tc", downTc as unknown as Module, "f16-tcp4x2p2-y16", MAX_BYTES, {
    WN: 1,
    CW: 64,
  }],
  // the same forms reading their expert weights in tiles
  ["moe_gemm_gate_up_tc", gateUpTc as unknown as Module, "f16-tcs-t16"],
  ["moe_gemm_gate_up_tc", gateUpTc as unknown as Module, "f16-tc-t16"],
  ["moe_gemm_down_tc", downTc as unknown as Module, "f16-tc-t16"],
  ["moe_gemm_down_tc", downTc as unknown as Module, "f16-tcs-t16"],
  ["moe_gemm_gate_up_tc", gateUpTc as unknown as Module, "f16-tcp4x2-t16", MAX_BYTES, {
    WN: 1,
    CW: 32,
  }],
  ["moe_gemm_down_tc", downTc as unknown as Module, "f16-tcp4x2-t16", MAX_BYTES, {
    WN: 1,
    CW: 64,
  }],
  ["paged_attention_tc", attentionTc as unknown as Module, "f16-tc"],
  ["paged_attention_tc", attentionTc as unknown as Module, "f16-tcs"],
  ["paged_attention_tc", attentionTc as unknown as Module, "f16-tcs2"],
  ["paged_attention_tc", attentionTc as unknown as Module, "f16-tcs4"],
  // the default's twin writing O as f16 for the o projection (the same output path as the others')
  ["paged_attention_tc", attentionTc as unknown as Module, "f16-tcs4-o16"],
  // the default's twins reading q as f16 (qk_norm_rope_cache's q16), with O as f32 and as f16
  ["paged_attention_tc", attentionTc as unknown as Module, "f16-tcs4-q16"],
  ["paged_attention_tc", attentionTc as unknown as Module, "f16-tcs4-q16-o16"],
  ["paged_attention_decode", decode as unknown as Module, "f16-tcdw", 16 * 2 ** 20],
  ["paged_attention_decode", decode as unknown as Module, "f16-tcdw2", 16 * 2 ** 20],
  ["paged_attention_decode", decode as unknown as Module, "f16-tcdw4", 16 * 2 ** 20],
  ["paged_attention_decode", decode as unknown as Module, "f16-tcdw2h", 16 * 2 ** 20],
  // the deep decode form's twin with qk_norm_rope_cache's work inside
  ["paged_attention_decode_qk", decodeQk as unknown as Module, "f16-tcdw2h", 16 * 2 ** 20],
];

for (const [kernel, mod, name, maxBytes = MAX_BYTES, consts] of FORMS) {
  const at = consts ? ` (${Object.entries(consts).map(([k, v]) => `${k} ${v}`).join(", ")})` : "";
  test(`${kernel} ${name}${at} with emulated subgroup matrices matches the reference`, async () => {
    const gpu = await sharedGpu();
    if (!gpu.f16) return; // no shader-f16: the forms' storage type cannot run here
    const real = variantByName(mod.spec, name);
    const { variant: emulated, remove } = emulatedVariant(mod.spec, real, consts);
    try {
      const spec = { ...mod.spec, variants: [emulated] };
      const cases = mod.cases.filter((c) =>
        (!c.variants || c.variants.includes(name)) && c.bytes(real) <= maxBytes
      );
      assert.ok(cases.length >= 3, `${cases.length} small cases`);
      for (const c of cases) {
        const kcase = { ...c, tolerance: () => c.tolerance(real) };
        const row = await validateCase(gpu, { spec, cases: [kcase] }, kcase, emulated, {
          reps: 0,
        });
        assert.ok(row.pass, `${c.label}: max |error| ${row.maxAbs}, ${row.bad} bad`);
      }
    } finally {
      remove();
    }
  });
}

test("the emulation leaves no subgroup operation and refuses what it cannot emulate", () => {
  // the prefill kernel loads matrices from storage and from workgroup memory, and stores some
  const src = readFileSync(SHADER_DIR + "paged_attention_tc.wgsl", "utf8");
  const out = emulateSubgroupMatrices(src);
  assert.not.match(out.replace(/\/\/.*$/gm, ""), /\bsubgroup/);
  assert.match(out, /fn emu_load_k_cache_f\(/);
  assert.match(out, /fn emu_store_s_tile\(/);
  assert.throws(
    () => emulateSubgroupMatrices(src.replace("subgroupShuffleXor(mt, 1u)", "subgroupAdd(mt)")),
    /subgroupAdd is not emulated/,
  );
});

test("qk_norm_rope_cache's f16 q (q16) through f16-tcs4-q16 gives bit for bit what its f32 q through f16-tcs4 gives", async () => {
  // the claim that makes q16 the default: the twin stages the same f16 values the form makes
  // of an f32 q (the H200's logits A/B checks it end to end on the real matrix instructions)
  const gpu = await sharedGpu();
  if (!gpu.f16) return;
  const c = attentionTc.cases.find((k) =>
    k.label === "1 seq q=45 prefix 19, bs=16 q/kv=6/2" && k.variants!.includes("f16-tcs4")
  )!;
  const p = c.params;
  const nq = p.num_q_heads, nkv = p.num_kv_heads, hd = p.head_dim;
  const rng = Rng.fromSeed("q16 chain");
  const inp = c.inputs(rng, variantByName(attentionTc.spec, "f16-tcs4"));
  const tokens = (inp.q as Float32Array).length / (nq * hd);
  const width = (nq + 2 * nkv) * hd;
  // q of random projections, normed and rotated (no slot: no K/V written)
  const qkIn = {
    qkv: rng.fillNormal(new Float32Array(tokens * width), 2),
    q_norm: rng.fillUniform(new Float32Array(hd), 0.5, 1.5),
    k_norm: rng.fillUniform(new Float32Array(hd), 0.5, 1.5),
    cos_sin: ropeTable(64, hd, 1e6),
    positions: Int32Array.from({ length: tokens }, (_, t) => t % 64),
    slot_mapping: new Int32Array(tokens).fill(-1),
    k_cache: new Float32Array(8),
    v_cache: new Float32Array(8),
  };
  const qkParams = {
    tokens,
    num_q_heads: nq,
    num_kv_heads: nkv,
    head_dim: hd,
    max_positions: 64,
    qk_norm: 1,
    eps: 1e-6,
    splits: 1,
    split_stride: 0,
    q16: 0,
    q16_scale: p.scale,
  };
  const n = tokens * nq * hd;
  const q = await dispatchOnce(gpu, qkNorm.spec, "f16", qkParams, {
    ...qkIn,
    q16: new Float32Array(8),
  }, { q_out: n * 4 });
  const q16 = await dispatchOnce(gpu, qkNorm.spec, "f16", { ...qkParams, q16: 1 }, {
    ...qkIn,
    q_out: new Float32Array(4),
  }, { q16: n * 2 });
  const outs: Uint32Array[] = [];
  for (const name of ["f16-tcs4", "f16-tcs4-q16"]) {
    const { variant, remove } = emulatedVariant(
      attentionTc.spec,
      variantByName(attentionTc.spec, name),
    );
    try {
      const spec = { ...attentionTc.spec, variants: [variant] };
      const got = await dispatchOnce(gpu, spec, variant.name, p, {
        ...inp,
        q: new Float32Array(q.q_out),
        q16: new Uint32Array(q16.q16),
        out16: new Float32Array(8),
      }, { out: n * 4 });
      outs.push(new Uint32Array(got.out));
    } finally {
      remove();
    }
  }
  assert.ok(outs[0].some((b) => b !== 0), "the f32-q form wrote O");
  const differ = outs[0].findIndex((b, i) => b !== outs[1][i]);
  assert.is(differ, -1, `O differs first at ${differ}`);
});

test.run();
