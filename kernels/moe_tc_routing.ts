/**
 * The routing of a tensor-core MoE GEMM validation case (moe_gather_f16,
 * moe_gemm_gate_up_tc, moe_gemm_down_tc): expert ids drawn as the other MoE cases draw
 * them, dispatched by the CPU reference of moe_dispatch with 64-row work items (or `blockM`), and
 * the row counts the tensor-core kernels' buffers need.
 */
import {
  MOE_BLOCK_M,
  moeDispatchParams,
  moeDispatchRef,
  moeMaxWorkItems,
  type RoutingPattern,
  sampleRouting,
} from "./moe_dispatch.ts";
import { Rng } from "../src/util/rng.ts";
import { expertsTouched } from "./moe_gemm_gate_up.ts";

/**
 * Rows past the last work item that the tensor-core expert GEMMs read: their longest item (the
 * prefill form `f16-tcp4x2` takes 128-row items, moeTcItemRows).
 */
export const MOE_TC_PAD_ROWS = 2 * MOE_BLOCK_M;

export interface MoeTcRouting {
  readonly label: string;
  readonly sortedToken: Uint32Array;
  readonly workItems: Uint32Array;
  /** tokens * topK */
  readonly rows: number;
  /** rows + MOE_TC_PAD_ROWS: the f16 operands' rows */
  readonly rowsPad: number;
  readonly maxItems: number;
  /** Experts with at least one work item. */
  readonly touched: number;
}

/** Routing of `tokens` tokens over the first `stored` of `experts` experts. */
export function moeTcRouting(
  tokens: number,
  experts: number,
  topK: number,
  pattern: RoutingPattern,
  shapeLabel: string,
  stored = experts,
  blockM = MOE_BLOCK_M,
): MoeTcRouting {
  const label = `tokens=${tokens} E=${experts} k=${topK} ${shapeLabel} ${pattern}${
    stored === experts ? "" : ` experts 0..${stored - 1} stored`
  }${blockM === MOE_BLOCK_M ? "" : ` items of ${blockM}`}`;
  const ids = sampleRouting(Rng.fromSeed(`routing/${label}`), tokens, stored, topK, pattern);
  const d = moeDispatchRef(
    ids,
    moeDispatchParams({
      tokens,
      topK,
      experts,
      blockM,
      gridXGateUp: 1,
      gridXDown: 1,
    }),
  );
  const rows = tokens * topK;
  return {
    label,
    sortedToken: d.sortedToken,
    workItems: d.workItems,
    rows,
    rowsPad: rows + MOE_TC_PAD_ROWS,
    maxItems: moeMaxWorkItems(rows, experts, blockM),
    touched: expertsTouched(d.workItems),
  };
}
