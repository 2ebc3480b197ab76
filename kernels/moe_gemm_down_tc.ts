/**
 * Grouped down GEMM of the MoE experts on the tensor cores (f16 16 x 16 x 16 subgroup
 * matrices, f32 sums): `y[r, n] = act[r] . w[e, n]` for the rows r
 * of each work item (expert e), with `act` the f16 activations of `moe_gemm_gate_up_tc`
 * (128 rows of padding after the last item, MOE_TC_PAD_ROWS) and `w` `[experts, hidden, inter]`. A workgroup
 * takes a work item's 64 rows x 64 columns (`f16-tc`, prefill-sized steps), or 32 columns of
 * it 16 rows at a time with the weights staged through workgroup memory from 16-byte loads
 * (`f16-tcs`, decode-sized steps: one pass over an expert's weights for 1-16 rows); launch
 * indirect after moe_dispatch (grid x `hidden / 64`, or `/ 32` for f16-tcs, y the items).
 * hidden must be a multiple of 64, inter of 32 (moeTcFits). The prefill forms' `-y16` twins
 * write y as f16 into `y16` instead (Y16_SUFFIX): the combine then reads half the bytes.
 */
import { fitting, type KernelCase, splitForTwins, unwrittenSentinel } from "./case.ts";
import type { KernelSpec, Variant } from "./kernel.ts";
import { tiledVariant } from "./expert_tiles.ts";
import { defineParams, type ParamValues } from "./params.ts";
import { moeGemmDownRef } from "./moe_gemm_down.ts";
import {
  MOE_TC_TILE,
  moeTcParams,
  moeTcTakes,
  moeTcTileFloats,
  moeTcVariants,
} from "./moe_gemm_gate_up_tc.ts";
import { moeTcRouting } from "./moe_tc_routing.ts";
import { MOE_BLOCK_M, type RoutingPattern, WORK_ITEMS_READ } from "./moe_dispatch.ts";
import { clampF16, roundToF16InPlace } from "../src/util/f16.ts";

const params = defineParams({ hidden: "u32", inter: "u32", max_items: "u32" });

/**
 * The name suffix of the prefill forms' twins that write y as f16 into `y16` (Y16 = 1, before
 * the expert-tiles suffix: `f16-tcp4x2-y16`, `f16-tcp4x2-y16-t16`): each tile goes through
 * workgroup memory on its way out (two barriers a tile), and the combine reads 2 bytes a value
 * instead of 4 (the experts' rows in f16, as vLLM's fused MoE keeps them).
 */
export const Y16_SUFFIX = "-y16";

const PREFILL_SHADER = "moe_gemm_down_tcp.wgsl";

/** The prefill forms with Y16 = 0, then their -y16 twins (each tiled too). */
function withY16Twins(variants: readonly Variant[]): Variant[] {
  const prefill = (v: Variant) => v.shader === PREFILL_SHADER;
  // y16 as 16-byte words (8 f16) in every prefill form, as the shader writes it (a wide-words
  // form declares the read_write vec4<T> bindings it names so)
  const words = (v: Variant): Variant => ({ ...v, readWrite: [...(v.readWrite ?? []), "y16"] });
  const base = variants.map((v) =>
    prefill(v) ? { ...words(v), consts: { ...v.consts, Y16: 0 } } : v
  );
  const twins = variants.filter((v) => prefill(v) && !v.expertTiles).map((v): Variant => ({
    ...words(v),
    name: v.name + Y16_SUFFIX,
    consts: { ...v.consts, Y16: 1 },
  }));
  return [...base, ...twins, ...twins.map(tiledVariant)];
}

/** The f16-output twin of a down form's name (its expert-tiles suffix kept), or null. */
export function y16TwinOf(name: string): string | null {
  const tiled = name.endsWith("-t16");
  const twin = tiled ? `${name.slice(0, -4)}${Y16_SUFFIX}-t16` : name + Y16_SUFFIX;
  return spec.variants.some((v) => v.name === twin) ? twin : null;
}

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_gemm_down_tc",
  shader: "moe_gemm_down_tc.wgsl",
  params,
  bindings: [
    { name: "act", type: "T", access: "read", shape: "[rows + 128, inter] (moe_gemm_gate_up_tc)" },
    { name: "w", type: "T", access: "read", shape: "[experts, hidden, inter]" },
    WORK_ITEMS_READ,
    { name: "y", type: "f32", access: "read_write", shape: "[rows, hidden]" },
    MOE_TC_TILE,
    {
      name: "y16",
      type: "vec4<T>",
      access: "read_write",
      shape: "[rows, hidden / 4] (the -y16 twins' y, f16; the others leave it)",
    },
  ],
  // both operands read-only: on the H200 (session 35, perf-decode profile of 64 x 1024, two runs
  // each way) a step's down GEMMs took 7.38-7.39 ms so, 7.45 with w read_write, 8.44-8.45 with
  // act and w (the gate/up GEMM's weights read faster read_write)
  variants: withY16Twins(moeTcVariants("moe_gemm_down_tcs.wgsl", 32, PREFILL_SHADER, 64)),
  expertWeights: { binding: "w", rows: (p) => p.hidden, cols: (p) => p.inter },
  grid: (p, v) => [p.hidden / (v.consts?.CW ?? 64), Math.max(1, p.max_items), 1],
};

/** Validated params; throws naming the bad field. */
export function moeGemmDownTcParams(
  hidden: number,
  inter: number,
  maxItems: number,
): ParamValues<typeof params.fields> {
  return moeTcParams("moe_gemm_down_tc", hidden, inter, maxItems);
}

function tcCase(
  tokens: number,
  experts: number,
  topK: number,
  hidden: number,
  inter: number,
  pattern: RoutingPattern,
  stored = experts,
  blockM = MOE_BLOCK_M,
): KernelCase<typeof params.fields> {
  const r = moeTcRouting(
    tokens,
    experts,
    topK,
    pattern,
    `hidden=${hidden} inter=${inter}`,
    stored,
    blockM,
  );
  return {
    label: r.label,
    params: moeGemmDownTcParams(hidden, inter, r.maxItems),
    ...fitting(spec.variants, (v) => moeTcTakes(v, blockM, hidden, inter)),
    inputs: (rng) => {
      const act = new Float32Array(r.rowsPad * inter);
      act.set(rng.fillNormal(new Float32Array(r.rows * inter)));
      return {
        act,
        w: rng.fillUniform(
          new Float32Array(stored * hidden * inter),
          -Math.sqrt(3 / inter),
          Math.sqrt(3 / inter),
        ),
        work_items: r.workItems,
      };
    },
    outputs: { y: r.rows * hidden, tile: moeTcTileFloats(hidden / 32, r.maxItems) },
    reference: (inp) => ({
      y: moeGemmDownRef(
        roundToF16InPlace(new Float32Array(inp.act as Float32Array)),
        inp.w as Float32Array,
        r.workItems,
        hidden,
        inter,
      ),
    }),
    tolerance: () => ({ atol: 2e-4, rtol: 2e-4 }),
    bytes: () => r.touched * hidden * inter * 2 + r.rows * inter * 2 + r.rows * hidden * 4,
    flops: r.rows * 2 * hidden * inter,
  };
}

/**
 * A case as two: the forms that write y as f32 (y16 bound, holding a sentinel they must leave),
 * and the -y16 twins, which write it into y16 as f16 (the reference clamped to f16's range and
 * rounded; y bound, 16 bytes of sentinel left as they are); a half that no form fits is left out.
 */
function withY16(c: KernelCase<typeof params.fields>): KernelCase<typeof params.fields>[] {
  const n = c.outputs.y;
  const { y: _, ...rest } = c.outputs;
  return splitForTwins(c, spec.variants.map((v) => v.name), (name) => name.includes(Y16_SUFFIX), {
    inputs: (rng, v) => ({ ...c.inputs(rng, v), y16: unwrittenSentinel(n) }),
    outputs: { ...c.outputs, y16: n },
    reference: (inp, v) => ({ ...c.reference(inp, v), y16: unwrittenSentinel(n) }),
  }, {
    label: `${c.label}, y as f16`,
    inputs: (rng, v) => ({ ...c.inputs(rng, v), y: unwrittenSentinel(4) }),
    outputs: { ...rest, y: 4, y16: n },
    reference: (inp, v) => ({
      y: unwrittenSentinel(4),
      y16: roundToF16InPlace(clampF16(Float32Array.from(c.reference(inp, v).y))),
    }),
    // (one f16 rounding of a sum the GPU adds in another order: 2^-11 of a value)
    tolerance: () => ({ atol: 2e-4, rtol: 1e-3 }),
    bytes: (v) => c.bytes(v) - 2 * n,
  });
}

export const cases = [
  tcCase(1, 8, 2, 64, 32, "spread"),
  tcCase(37, 8, 2, 64, 64, "skewed"),
  // two 64-column tiles a weight row (at 64 a row is one tile, and tiles lie as rows do)
  tcCase(37, 8, 2, 64, 128, "skewed"),
  tcCase(301, 4, 2, 192, 96, "skewed"),
  tcCase(256, 128, 8, 2048, 768, "spread", 8),
  tcCase(256, 128, 8, 2048, 768, "spread"),
  // decode steps: 0.5 and 4 rows an expert
  tcCase(8, 128, 8, 2048, 768, "spread"),
  tcCase(64, 128, 8, 2048, 768, "spread"),
  // a prefill step of Qwen3-30B-A3B: 2048 tokens, 128 rows an expert
  tcCase(2048, 128, 8, 2048, 768, "spread"),
  // the prefill forms' own (hidden 256: four subgroups' columns): one row, short items and
  // full ones, several column blocks of the one- and two-subgroup forms
  tcCase(1, 8, 2, 256, 32, "spread"),
  tcCase(150, 4, 2, 256, 64, "skewed"),
  tcCase(37, 8, 2, 256, 64, "skewed"),
  // 128-row items (f16-tcp4x2): full and short ones, and a Qwen3-30B-A3B prefill step
  tcCase(301, 4, 2, 256, 64, "skewed", 4, 128),
  tcCase(2048, 128, 8, 2048, 768, "spread", 128, 128),
].flatMap(withY16);
