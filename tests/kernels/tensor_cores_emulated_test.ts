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

test.run();
