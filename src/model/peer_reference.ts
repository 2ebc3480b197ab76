/**
 * The PyTorch peer numbers of ../shared/design/GPU.md for Qwen3-30B-A3B shapes on one
 * H200 (PyTorch 2.11, SDPA attention, torch._grouped_mm experts, random bf16 weights):
 * what webfpm's decode and prefill are compared against when the peer script was not run
 * in the same session. These are quoted figures, not measurements of this run.
 *
 * ```ts
 * GPU_MD_DECODE.find((p) => p.batch === 64 && p.ctx === 1024)?.torchGraphMs; // 30.58
 * ```
 */

/** One decode point of GPU.md's table. */
export interface PeerDecodePoint {
  readonly batch: number;
  readonly ctx: number;
  readonly torchEagerMs: number;
  readonly torchGraphMs: number;
  readonly rooflineMs: number;
}

/** GPU.md's decode table (batch x ctx, ms per step). */
export const GPU_MD_DECODE: readonly PeerDecodePoint[] = [
  { batch: 1, ctx: 1024, torchEagerMs: 41.8, torchGraphMs: 8.81, rooflineMs: 1.37 },
  { batch: 8, ctx: 1024, torchEagerMs: 44.3, torchGraphMs: 17.27, rooflineMs: 5.96 },
  { batch: 32, ctx: 1024, torchEagerMs: 69.2, torchGraphMs: 27.66, rooflineMs: 12.14 },
  { batch: 64, ctx: 1024, torchEagerMs: 69.4, torchGraphMs: 30.58, rooflineMs: 14.66 },
  { batch: 128, ctx: 1024, torchEagerMs: 43.6, torchGraphMs: 33.01, rooflineMs: 16.30 },
  { batch: 64, ctx: 8192, torchEagerMs: 43.3, torchGraphMs: 40.34, rooflineMs: 24.69 },
];

/** One prefill point of GPU.md's table. */
export interface PeerPrefillPoint {
  readonly batch: number;
  readonly tokens: number;
  readonly torchEagerMs: number;
  readonly tokensPerSecond: number;
  readonly tflops: number;
}

/** GPU.md's prefill table (PyTorch eager). */
export const GPU_MD_PREFILL: readonly PeerPrefillPoint[] = [
  { batch: 1, tokens: 2048, torchEagerMs: 69.1, tokensPerSecond: 29634, tflops: 186 },
  { batch: 8, tokens: 2048, torchEagerMs: 411.1, tokensPerSecond: 39852, tflops: 250 },
  { batch: 64, tokens: 512, torchEagerMs: 768.2, tokensPerSecond: 42656, tflops: 242 },
];
