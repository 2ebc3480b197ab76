/**
 * What each stage of the MoE block must move and compute for a step: the minimum bytes (each
 * touched expert's weights once, activations in and out) and FLOPs, for `used` experts that
 * receive rows. The roofline of a step (src/model/step_cost.ts) and the block's docs use it.
 *
 * ```ts
 * moeStageCosts({ hidden: 2048, inter: 768, experts: 128, topK: 8, weightBytes: 2 }, 64, 120)
 *   .gate_up.bytes; // 120 experts' gate and up rows, plus x and act
 * ```
 */
import { MOE_BLOCK_M, moeMaxWorkItems } from "./moe_dispatch.ts";

/** The block's dispatches in order (a profile's span labels are `moe STAGE`). */
export type MoeStage = "router" | "dispatch" | "gate_up" | "down" | "combine";

/** A stage's label in profiles and in the step cost (`moe gate_up`, ...). */
export const MOE_STAGE_LABEL: Readonly<Record<MoeStage, string>> = {
  router: "moe router",
  dispatch: "moe dispatch",
  gate_up: "moe gate_up",
  down: "moe down",
  combine: "moe combine",
};

/** The kernel each stage dispatches. */
export const MOE_STAGE_KERNEL: Readonly<Record<MoeStage, string>> = {
  router: "moe_router",
  dispatch: "moe_dispatch",
  gate_up: "moe_gemm_gate_up",
  down: "moe_gemm_down",
  combine: "moe_combine",
};

export interface MoeCostShape {
  readonly hidden: number;
  readonly inter: number;
  readonly experts: number;
  readonly topK: number;
  /** Bytes per stored weight (2 for f16, 4 for f32). */
  readonly weightBytes: number;
}

/** Bytes and FLOPs of each stage for `tokens` tokens of which `used` experts get rows. */
export function moeStageCosts(
  shape: MoeCostShape,
  tokens: number,
  used: number,
): Record<MoeStage, { bytes: number; flops: number }> {
  const { hidden: H, inter: I, experts: E, topK: k, weightBytes: s } = shape;
  const n = tokens * k;
  const items = moeMaxWorkItems(n, E, MOE_BLOCK_M);
  return {
    router: { bytes: tokens * E * 4 + n * 8, flops: tokens * E * 8 },
    dispatch: { bytes: n * 12 + (E + 1) * 4 + 16 * (items + 1) + 24, flops: 0 },
    gate_up: { bytes: used * 2 * I * H * s + n * H * 4 + n * I * 4, flops: n * 4 * I * H },
    down: { bytes: used * H * I * s + n * I * 4 + n * H * 4, flops: n * 2 * I * H },
    combine: { bytes: tokens * H * (8 + 4 * k) + n * 8, flops: n * H * 2 },
  };
}
