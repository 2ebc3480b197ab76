/**
 * A batch-1 decode step's MoE routing inside its gate/up GEMM (the lane-group decode forms of
 * moe_gemm_gate_up): each workgroup ranks the token's router logits itself, as moe_router does
 * (by logit, ties to the lower expert index), and grid row y computes the act row of the expert
 * of rank y; the workgroups of column block 0 write the routing the kernels after it read
 * (topk_ids, topk_weights, row_of, work_items and the indirect args, of which moe_gemm_down's
 * are read). Rows are in rank order, not expert order: row j is the token's j-th choice (row_of
 * is the identity). Where moe_route_dispatch and the gate/up GEMM take two dispatches a layer,
 * this takes one: a batch-1 step has 48 dispatches fewer at Qwen3-30B-A3B, and 48 kernel
 * boundaries fewer.
 * expert_offsets and sorted_token are not written (no kernel after it reads them at batch 1).
 * On the H200 (2026-12-03, Qwen3-30B-A3B, perf-decode, two processes each way, alternating)
 * batch-1 decode steps took 4.57 / 4.57 ms of GPU against 4.83 / 4.82 at ctx 1024 and 4.84 /
 * 4.85 against 5.10 / 5.10 at 8192; moe_route_dispatch alone had cost 0.53 ms a step.
 *
 * Launch directly on `spec.grid` (column blocks x top_k). It binds nine storage buffers in one
 * stage (spec.bindings; WebGPU's default limit is 8); devices that allow fewer keep
 * moe_route_dispatch.
 *
 * ```ts
 * const p = moeGemmGateUpRoutedParams({ experts: 128, topK: 8, normTopk: true }, 2048, 768, {
 *   gateUp: 24,
 *   down: 64,
 * });
 * const { act, ids, weights } = moeGemmGateUpRoutedRef(logits, x, w, p);
 * ```
 */
import { expertTilesFit } from "./expert_tiles.ts";
import { fitting, type KernelCase } from "./case.ts";
import type { KernelSpec, Variant } from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";
import * as router from "./moe_router.ts";
import { moeGemmGateUpRef } from "./moe_gemm_gate_up.ts";
import {
  MOE_PRODUCTION_VARIANTS,
  moeColumnsPerWorkgroup,
  moeDecodeVariants,
} from "./moe_decode_variants.ts";
import { wideWordsFit } from "./lane_group_variants.ts";
import * as dispatch from "./moe_dispatch.ts";

const params = defineParams({
  hidden: "u32",
  inter: "u32",
  experts: "u32",
  top_k: "u32",
  norm_topk: "u32",
  grid_x_gate_up: "u32",
  grid_x_down: "u32",
});

export const spec: KernelSpec<typeof params.fields> = {
  name: "moe_gemm_gate_up_routed",
  shader: "moe_gemm_gate_up_routed.wgsl",
  params,
  bindings: [
    { name: "logits", type: "f32", access: "read", shape: "[experts] (the one token's)" },
    { name: "x", type: "vec4<f32>", access: "read", shape: "[1, hidden/4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[experts, 2 * inter, hidden/4]" },
    { name: "act", type: "f32", access: "read_write", shape: "[top_k, inter] (rank order)" },
    // moe_router's outputs, then moe_dispatch's that the kernels after it read (one token)
    ...router.spec.bindings.filter((x) => x.name !== "logits"),
    ...dispatch.spec.bindings.filter((x) =>
      ["row_of", "work_items", "dispatch_args"].includes(x.name)
    ),
  ],
  expertWeights: { binding: "w", rows: (p) => 2 * p.inter, cols: (p) => p.hidden },
  // the lane-group decode forms of moe_gemm_gate_up, with the router's arrays
  variants: moeDecodeVariants("moe_gemm_gate_up_routed.wgsl").map((v) => ({
    ...v,
    consts: { ...v.consts, MAX_E: router.MOE_MAX_EXPERTS, MAX_K: router.MOE_MAX_TOPK },
    // the logits, the ranks' experts and logits, and two rounds' subgroup winners
    workgroupBytes: (router.MOE_MAX_EXPERTS + 2 * router.MOE_MAX_TOPK + 2 * (v.consts!.WG / 8)) *
      4,
  })),
  grid: (p, v) => [Math.ceil(p.inter / moeColumnsPerWorkgroup(v, 64)), p.top_k, 1],
};

/** Validated params; throws naming the bad field. */
export function moeGemmGateUpRoutedParams(
  r: Omit<router.MoeRouterShape, "tokens">,
  hidden: number,
  inter: number,
  gridX: { readonly gateUp: number; readonly down: number },
): ParamValues<typeof params.fields> {
  const rp = router.moeRouterParams({ ...r, tokens: 1 });
  for (const [name, v] of [["hidden", hidden], ["inter", inter]] as const) {
    if (!Number.isInteger(v) || v < 4 || v % 4) {
      throw new Error(`moe_gemm_gate_up_routed: ${name} = ${v} must be a positive multiple of 4`);
    }
  }
  for (const [name, v] of [["grid_x_gate_up", gridX.gateUp], ["grid_x_down", gridX.down]]) {
    if (!Number.isInteger(v) || (v as number) < 1 || (v as number) > 65535) {
      throw new Error(`moe_gemm_gate_up_routed: ${name} = ${v} must be in 1..65535`);
    }
  }
  return {
    hidden,
    inter,
    experts: rp.experts,
    top_k: rp.top_k,
    norm_topk: rp.norm_topk,
    grid_x_gate_up: gridX.gateUp,
    grid_x_down: gridX.down,
  };
}

/** The routing outputs of one token's choices in rank order (what the kernel writes). */
export interface RoutedRouting {
  readonly ids: Int32Array;
  readonly weights: Float32Array;
  readonly rowOf: Uint32Array;
  /** work_items: [top_k, top_k, 0, 0], then (expert of rank j, j, j + 1, 0). */
  readonly workItems: Uint32Array;
  readonly dispatchArgs: Uint32Array;
}

/** CPU reference of the routing: moe_router's top-k, rows in rank order. */
export function moeRoutedRoutingRef(
  logits: Float32Array,
  p: ParamValues<typeof params.fields>,
): RoutedRouting {
  const k = p.top_k;
  const { ids, weights } = router.moeRouterRef(
    logits,
    router.moeRouterParams({ tokens: 1, experts: p.experts, topK: k, normTopk: !!p.norm_topk }),
  );
  const workItems = new Uint32Array(4 * (1 + k));
  workItems.set([k, k, 0, 0]);
  for (let j = 0; j < k; j++) workItems.set([ids[j], j, j + 1, 0], 4 * (1 + j));
  return {
    ids,
    weights,
    rowOf: Uint32Array.from({ length: k }, (_, j) => j),
    workItems,
    dispatchArgs: Uint32Array.from([p.grid_x_gate_up, k, 1, p.grid_x_down, k, 1]),
  };
}

/** CPU reference (f64 dot products): the routing, and act `[top_k, inter]` in rank order. */
export function moeGemmGateUpRoutedRef(
  logits: Float32Array,
  x: Float32Array,
  w: Float32Array,
  p: ParamValues<typeof params.fields>,
): RoutedRouting & { act: Float32Array } {
  const routing = moeRoutedRoutingRef(logits, p);
  const act = moeGemmGateUpRef(
    x,
    w,
    new Uint32Array(p.top_k),
    routing.workItems,
    p.hidden,
    p.inter,
  );
  return { ...routing, act };
}

function routedCase(
  experts: number,
  topK: number,
  normTopk: boolean,
  hidden: number,
  inter: number,
  note = "",
  { stored = experts, ties = false, variants }: {
    /** Only experts below it are stored and may win (the others' logits are -1e4). */
    stored?: number;
    /** Logits in quarter steps: exact ties between experts. */
    ties?: boolean;
    variants?: readonly string[];
  } = {},
): KernelCase<typeof params.fields> {
  const label = `E=${experts} k=${topK}${normTopk ? " norm" : ""} hidden=${hidden} inter=${inter}${
    stored === experts ? "" : ` experts 0..${stored - 1} stored`
  }${ties ? " ties" : ""} ${note}`.trim();
  const p = moeGemmGateUpRoutedParams({ experts, topK, normTopk }, hidden, inter, {
    gateUp: 3,
    down: 5,
  });
  const memo = new Map<string, ReturnType<typeof moeGemmGateUpRoutedRef>>();
  return {
    label,
    params: p,
    inputs: (rng) => {
      const logits = rng.fillNormal(new Float32Array(experts), 2);
      if (ties) { for (let e = 0; e < experts; e++) logits[e] = Math.round(logits[e]) / 4; }
      for (let e = stored; e < experts; e++) logits[e] = -1e4;
      return {
        logits,
        x: rng.fillNormal(new Float32Array(hidden)),
        w: rng.fillUniform(
          new Float32Array(stored * 2 * inter * hidden),
          -Math.sqrt(3 / hidden),
          Math.sqrt(3 / hidden),
        ),
      };
    },
    outputs: {
      act: topK * inter,
      topk_ids: topK,
      topk_weights: topK,
      row_of: topK,
      work_items: 4 * (1 + topK),
      dispatch_args: 6,
    },
    reference: (inp, v: Variant) => {
      let r = memo.get(v.dtype);
      if (!r) {
        r = moeGemmGateUpRoutedRef(
          inp.logits as Float32Array,
          inp.x as Float32Array,
          inp.w as Float32Array,
          p,
        );
        memo.set(v.dtype, r);
      }
      return {
        act: r.act,
        topk_ids: r.ids,
        topk_weights: r.weights,
        row_of: r.rowOf,
        work_items: r.workItems,
        dispatch_args: r.dispatchArgs,
      };
    },
    // the act rows as moe_gemm_gate_up's; the weights as moe_router's; the rest exact
    tolerance: () => ({ atol: 2e-4, rtol: 2e-4 }),
    bytes: (v) =>
      topK * 2 * inter * hidden * (v.dtype === "f16" ? 2 : 4) + experts * 4 + hidden * 4 +
      topK * inter * 4 + topK * 12 + 16 * (1 + topK) + 24,
    flops: topK * 2 * inter * (2 * hidden + 2) + experts * 6,
    ...(variants ? { variants } : fitting(
      spec.variants,
      (v) => (!v.expertTiles || expertTilesFit(inter, hidden)) && wideWordsFit(v, hidden),
    )),
  };
}

/** The production decode forms' routed twins. */
const PRODUCTION = MOE_PRODUCTION_VARIANTS.filter((n) => spec.variants.some((v) => v.name === n));

export const cases = [
  routedCase(8, 2, true, 64, 32),
  routedCase(8, 2, false, 64, 36, "", { ties: true }),
  // hidden / 4 = 66: the unrolled loop, then its one-step tail
  routedCase(16, 4, true, 264, 40),
  // whole tiles of 16 rows x 64 columns (the tiled twins)
  routedCase(8, 2, false, 192, 64),
  routedCase(router.MOE_MAX_EXPERTS, 8, false, 64, 32, "512 experts", { stored: 16 }),
  routedCase(60, router.MOE_MAX_TOPK, true, 64, 32, "", { stored: 20 }),
  routedCase(128, 8, true, 2048, 768, "qwen3-30b-a3b", { stored: 16, variants: PRODUCTION }),
  routedCase(128, 8, true, 2048, 768, "qwen3-30b-a3b ties", {
    stored: 16,
    ties: true,
    variants: PRODUCTION,
  }),
];
