/**
 * Point helpers: the key that names a point everywhere (logs, artifact, rank
 * agreement), the total KV a point reads (which decides median-of-N), and the execution
 * order of the design (decode: batch desc, KV desc; prefill: largest first).
 *
 * ```ts
 * pointKey({ kind: "decode", batch_size: 8, total_kv_read_tokens: 65536 }); // "decode:B8:K65536"
 * ```
 */
import type { BenchPoint, DecodePoint, PrefillPoint } from "./artifact.ts";

/** `prefill:B{b}:T{t}:K{k}` or `decode:B{b}:K{k}`. */
export function pointKey(point: BenchPoint): string {
  return point.kind === "prefill"
    ? `prefill:B${point.batch_size}:T${point.total_prefill_tokens}:K${point.total_kv_read_tokens}`
    : `decode:B${point.batch_size}:K${point.total_kv_read_tokens}`;
}

/** A prefill point (fields in the artifact's order). */
export function prefillPoint(b: number, t: number, k: number): PrefillPoint {
  return { kind: "prefill", batch_size: b, total_prefill_tokens: t, total_kv_read_tokens: k };
}

/** A decode point. */
export function decodePoint(b: number, k: number): DecodePoint {
  return { kind: "decode", batch_size: b, total_kv_read_tokens: k };
}

/** KV tokens the point's measured step reads over all requests (the giant-point test). */
export function totalKv(point: BenchPoint): number {
  return point.total_kv_read_tokens;
}

/** Decode points in execution order: batch desc, then KV desc. */
export function orderDecode(points: readonly DecodePoint[]): DecodePoint[] {
  return [...points].sort((a, b) =>
    b.batch_size - a.batch_size || b.total_kv_read_tokens - a.total_kv_read_tokens
  );
}

/** Prefill points largest first: tokens desc, then batch desc, then KV desc. */
export function orderPrefill(points: readonly PrefillPoint[]): PrefillPoint[] {
  return [...points].sort((a, b) =>
    b.total_prefill_tokens - a.total_prefill_tokens || b.batch_size - a.batch_size ||
    b.total_kv_read_tokens - a.total_kv_read_tokens
  );
}
