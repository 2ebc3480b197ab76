/**
 * Every kernel module, in the order validation prints them.
 *
 * ```ts
 * for (const k of KERNELS) console.log(k.spec.name, k.cases.length);
 * ```
 */
import type { KernelModule } from "./case.ts";
import * as castF16 from "./cast_f16.ts";
import * as embedding from "./embedding.ts";
import * as fillRandom from "./fill_random.ts";
import * as gatherRows from "./gather_rows.ts";
import * as gemm from "./gemm.ts";
import * as gemmTc from "./gemm_tc.ts";
import * as gemv from "./gemv.ts";
import * as gemvNorm from "./gemv_norm.ts";
import * as gemvScaled from "./gemv_scaled.ts";
import * as moeCombine from "./moe_combine.ts";
import * as moeCombineNorm from "./moe_combine_norm.ts";
import * as moeDispatch from "./moe_dispatch.ts";
import * as moeGemmDown from "./moe_gemm_down.ts";
import * as moeGemmDownCombine from "./moe_gemm_down_combine.ts";
import * as moeGemmGateUp from "./moe_gemm_gate_up.ts";
import * as moeGemmGateUpRouted from "./moe_gemm_gate_up_routed.ts";
import * as moeGatherF16 from "./moe_gather_f16.ts";
import * as moeGemmGateUpTc from "./moe_gemm_gate_up_tc.ts";
import * as moeGemmDownTc from "./moe_gemm_down_tc.ts";
import * as moeRouter from "./moe_router.ts";
import * as moeRouterFused from "./moe_router_fused.ts";
import * as moeRouterNorm from "./moe_router_norm.ts";
import * as moeRouterLogits from "./moe_router_logits.ts";
import * as moeRouteDispatch from "./moe_route_dispatch.ts";
import * as kvBlockCopy from "./kv_block_copy.ts";
import * as pagedAttention from "./paged_attention.ts";
import * as pagedAttentionTc from "./paged_attention_tc.ts";
import * as pagedAttentionDecode from "./paged_attention_decode.ts";
import * as pagedAttentionDecodeQk from "./paged_attention_decode_qk.ts";
import * as pagedAttentionDecodeReduce from "./paged_attention_decode_reduce.ts";
import * as qkNormRopeCache from "./qk_norm_rope_cache.ts";
import * as readBandwidth from "./read_bandwidth.ts";
import * as rmsnorm from "./rmsnorm.ts";
import * as rmsnormF16 from "./rmsnorm_f16.ts";
import * as rope from "./rope.ts";
import * as sample from "./sample.ts";
import * as siluMul from "./silu_mul.ts";
import * as splitkReduce from "./splitk_reduce.ts";
import * as softmax from "./softmax.ts";

export const KERNELS: readonly KernelModule[] = [
  embedding,
  rmsnorm,
  rmsnormF16,
  gemv,
  gemvNorm,
  gemvScaled,
  gemm,
  castF16,
  gemmTc,
  splitkReduce,
  softmax,
  rope,
  siluMul,
  readBandwidth,
  gatherRows,
  fillRandom,
  qkNormRopeCache,
  pagedAttention,
  pagedAttentionTc,
  pagedAttentionDecode,
  pagedAttentionDecodeQk,
  pagedAttentionDecodeReduce,
  kvBlockCopy,
  moeRouter,
  moeRouterFused,
  moeRouterNorm,
  moeRouterLogits,
  moeDispatch,
  moeRouteDispatch,
  moeGemmGateUp,
  moeGemmGateUpRouted,
  moeGemmDown,
  moeGemmDownCombine,
  moeGatherF16,
  moeGemmGateUpTc,
  moeGemmDownTc,
  moeCombine,
  moeCombineNorm,
  sample,
] as unknown as KernelModule[];

/** Looks a kernel up by name; throws listing the known ones. */
export function kernelByName(name: string): KernelModule {
  const k = KERNELS.find((m) => m.spec.name === name);
  if (!k) {
    throw new Error(
      `unknown kernel '${name}'; known: ${KERNELS.map((m) => m.spec.name).join(", ")}`,
    );
  }
  return k;
}
