/**
 * Whether the engine can hold a point, before anything runs: the step limits, the
 * model length (`max(ctx, 2) + 1 + steady steps <= max_model_len` for decode,
 * `prompt + 2 <= max_model_len` for prefill), the pool minus its watermark, whole
 * hash blocks of prefix, and prefill chunking that schedules exactly the requested
 * tokens in one step. Each problem names the field it is about.
 *
 * ```ts
 * pointProblems(decodePoint(4, 1 << 20), capacity, 1);
 * // [{ field: "total_kv_read_tokens", message: "a request of 262144 tokens ... max_model_len 4096" }]
 * ```
 */
import type { BenchCapacity, BenchPoint } from "./artifact.ts";
import { blocksFor } from "./capacity.ts";
import { balancedPartition, decodePlan, prefixPartition } from "./partition.ts";

/** One reason a point cannot run, and the field it is about. */
export interface PointProblem {
  /** The manifest field. */
  readonly field: "batch_size" | "total_prefill_tokens" | "total_kv_read_tokens";
  /** What is wrong, in the engine's numbers. */
  readonly message: string;
}

/** KV blocks a point holds at its peak (all requests, after `samples` timed steps). */
export function pointBlocks(point: BenchPoint, blockSize: number, samples: number): number {
  if (point.kind === "decode") {
    return decodePlan(point.total_kv_read_tokens, point.batch_size)
      .reduce((s, r) => s + blocksFor(r.promptTokens + samples, blockSize), 0);
  }
  const t = balancedPartition(point.total_prefill_tokens, point.batch_size);
  const k = prefixPartition(point.total_kv_read_tokens, point.batch_size, blockSize);
  return t.reduce((s, ti, i) => s + blocksFor(ti + k[i], blockSize), 0);
}

/**
 * Problems that keep `point` from running on `capacity` with `samples` timed samples
 * (steady steps for decode); empty when it can run.
 */
export function pointProblems(
  point: BenchPoint,
  capacity: BenchCapacity,
  samples: number,
): PointProblem[] {
  const out: PointProblem[] = [];
  const B = point.batch_size;
  const K = point.total_kv_read_tokens;
  const bs = capacity.block_size;
  if (B > capacity.max_num_seqs) {
    out.push({
      field: "batch_size",
      message: `${B} requests exceed max_num_seqs ${capacity.max_num_seqs}`,
    });
  }
  if (point.kind === "decode") {
    if (B > capacity.max_batched_tokens) {
      out.push({
        field: "batch_size",
        message: `${B} decode tokens exceed max_batched_tokens ${capacity.max_batched_tokens}`,
      });
    }
    const longest = decodePlan(K, B)[0].promptTokens + 1 + samples;
    if (longest > capacity.max_model_len) {
      out.push({
        field: "total_kv_read_tokens",
        message:
          `a request holding ${
            decodePlan(K, B)[0].ctx
          } KV tokens plus ${samples} steady step(s) needs ` +
          `${longest} tokens > max_model_len ${capacity.max_model_len}`,
      });
    }
  } else {
    const T = point.total_prefill_tokens;
    if (T > capacity.max_batched_tokens) {
      out.push({
        field: "total_prefill_tokens",
        message: `${T} tokens cannot be scheduled in one step: max_batched_tokens is ` +
          `${capacity.max_batched_tokens}`,
      });
    }
    if (K > 0) {
      if (!capacity.prefix_caching) {
        out.push({
          field: "total_kv_read_tokens",
          message: "a KV-read point needs prefix caching, which is off",
        });
      }
      try {
        prefixPartition(K, B, bs);
      } catch (err) {
        out.push({ field: "total_kv_read_tokens", message: (err as Error).message });
        return out;
      }
    }
    const t = balancedPartition(T, B);
    const k = K > 0 ? prefixPartition(K, B, bs) : new Array(B).fill(0);
    const longest = Math.max(...t.map((ti, i) => Math.max(ti + k[i], 2)));
    if (longest + 2 > capacity.max_model_len) {
      out.push({
        field: K > 0 ? "total_kv_read_tokens" : "total_prefill_tokens",
        message: `a request of ${longest} prompt tokens needs ${longest + 2} > max_model_len ` +
          `${capacity.max_model_len}`,
      });
    }
  }
  if (out.length === 0) {
    const need = pointBlocks(point, bs, samples);
    if (need > capacity.usable_blocks) {
      out.push({
        field: "total_kv_read_tokens",
        message: `it needs ${need} KV blocks of ${bs} tokens; the pool has ` +
          `${capacity.usable_blocks} above the watermark`,
      });
    }
  }
  return out;
}

/** True when the point can run. */
export function isFeasible(point: BenchPoint, capacity: BenchCapacity, samples: number): boolean {
  return pointProblems(point, capacity, samples).length === 0;
}
