/**
 * What counts as a new shape for the discarded replica: the step's batch structure,
 * which decides the kernels' grid sizes, the GEMV/GEMM choice, the MoE work lists and
 * the buffers and bind groups the first run creates. Decode: `decode:B`; prefill:
 * `prefill:B:T` (the KV read changes only how much each request reads).
 *
 * ```ts
 * shapeKey(decodePoint(8, 65536)); // "decode:8"
 * ```
 */
import type { BenchPoint } from "./artifact.ts";

/** The shape of the point's measured step. */
export function shapeKey(point: BenchPoint): string {
  return point.kind === "decode"
    ? `decode:${point.batch_size}`
    : `prefill:${point.batch_size}:${point.total_prefill_tokens}`;
}

/** The artifact's description of a shape key. */
export const SHAPE_KEY_RULE = "decode:B | prefill:B:T";
