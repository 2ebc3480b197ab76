/**
 * qk_norm_rope_cache on its own: what it stores into the paged KV cache (its validation cases
 * compare the caches whole; these are the edges they do not reach).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { sharedGpu } from "../shared_gpu.ts";
import { dispatchOnce } from "./dispatch_once.ts";
import * as qk from "../../kernels/qk_norm_rope_cache.ts";
import { ropeTable } from "../../kernels/rope.ts";

for (const variant of ["f16", "f16-wg64"]) {
  test(`${variant}: an f16 KV cache keeps an outlier finite: K and V past f16's range are stored as 65504`, async () => {
    const gpu = await sharedGpu();
    if (!gpu.f16) return; // the f16 cache form needs shader-f16
    const nq = 1, nkv = 1, hd = 8, blockSize = 1, numBlocks = 2;
    const width = (nq + 2 * nkv) * hd;
    const qkv = new Float32Array(width).fill(0.5);
    // V head: one element past f16's range (a V projection outlier; Mixtral has no qk norm either)
    qkv[(nq + nkv) * hd + 3] = 1e5;
    qkv[nq * hd + 5] = -2e5; // and a K one (no qk norm, as Mixtral)
    const out = await dispatchOnce(
      gpu,
      qk.spec,
      variant,
      {
        tokens: 1,
        num_q_heads: nq,
        num_kv_heads: nkv,
        head_dim: hd,
        max_positions: 4,
        qk_norm: 0,
        eps: 1e-6,
        splits: 1,
        split_stride: width,
        q16: 0,
        q16_scale: 1,
      },
      {
        qkv,
        q_norm: new Float32Array(hd).fill(1),
        k_norm: new Float32Array(hd).fill(1),
        cos_sin: ropeTable(4, hd, 10000),
        positions: new Int32Array([0]),
        slot_mapping: new Int32Array([1]),
      },
      {
        q_out: nq * hd * 4,
        k_cache: numBlocks * blockSize * nkv * hd * 2,
        v_cache: numBlocks * blockSize * nkv * hd * 2,
        q16: 16,
      },
    );
    // 0x7bff is 65504 (what cast_f16 writes for the same value), 0xfbff -65504; +Inf is 0x7c00
    assert.is(new Uint16Array(out.v_cache)[hd + 3], 0x7bff, "V");
    const k = new Uint16Array(out.k_cache);
    assert.is(k[hd + 5], 0xfbff, "K (position 0: RoPE leaves it where it is)");
    // nothing the step wrote (slot 1) is Inf or NaN
    const written = [...k.slice(hd, 2 * hd), ...new Uint16Array(out.v_cache).slice(hd, 2 * hd)];
    assert.not.ok(written.some((h) => (h & 0x7c00) === 0x7c00));
  });
}

test.run();
