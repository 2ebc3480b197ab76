/**
 * Copy-on-write forks of KV blocks: for every pair (src, dst) of `pairs` [n, 2] i32, block
 * dst of the layer's K and V caches becomes a copy of block src (StepBatch.blockCopies,
 * dispatched once per layer before attention).
 *
 * ```ts
 * const pairs = packBlockCopies(batch.blockCopies, numBlocks); // i32 [n, 2], checked
 * const p = { num_pairs: batch.blockCopies.length, block_size: 16, num_kv_heads: 4,
 *   head_dim: 128 };
 * pass.dispatchWorkgroups(...spec.grid(p, variant, gpu));
 * ```
 *
 * Bytes: per pair, one block of K and one of V read and written:
 * n * 4 * block_size * num_kv_heads * head_dim * sizeof(T).
 */
import type { KernelCase } from "./case.ts";
import type { KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({
  num_pairs: "u32",
  block_size: "u32",
  num_kv_heads: "u32",
  head_dim: "u32",
});

/** Params of kv_block_copy. */
export type KvBlockCopyParams = { readonly [K in keyof typeof params.fields]: number };

const WG = 256;
const PER_THREAD = 4;

export const spec: KernelSpec<typeof params.fields> = {
  name: "kv_block_copy",
  shader: "kv_block_copy.wgsl",
  params,
  bindings: [
    { name: "pairs", type: "i32", access: "read", shape: "[num_pairs, 2] (src, dst)" },
    {
      name: "k_cache",
      type: "vec4<T>",
      access: "read_write",
      shape: "[num_blocks, block_size, num_kv_heads, head_dim / 4]",
    },
    {
      name: "v_cache",
      type: "vec4<T>",
      access: "read_write",
      shape: "[num_blocks, block_size, num_kv_heads, head_dim / 4]",
    },
  ],
  variants: [
    { name: "f32", dtype: "f32", consts: { WG, PER_THREAD } },
    { name: "f16", dtype: "f16", consts: { WG, PER_THREAD } },
  ],
  grid: (p, _v, gpu) => {
    const blockElems = p.block_size * p.num_kv_heads * p.head_dim;
    if (blockElems % 4 !== 0 || blockElems === 0) {
      throw new Error(`kv_block_copy: a block of ${blockElems} elements is not a multiple of 4`);
    }
    const chunks = Math.ceil(blockElems / 4 / (WG * PER_THREAD));
    const max = gpu.limits.maxComputeWorkgroupsPerDimension ?? 65535;
    const z = Math.ceil(Math.max(1, p.num_pairs) / max);
    return [chunks, Math.ceil(Math.max(1, p.num_pairs) / z), z];
  },
};

/**
 * `pairs` i32 [n, 2] from StepBatch.blockCopies, checked: ids inside [0, numBlocks), src !=
 * dst, every dst distinct and never a src of another pair (the copies run in parallel, so
 * a chain would race).
 */
export function packBlockCopies(
  copies: readonly (readonly [number, number])[],
  numBlocks: number,
): Int32Array {
  const dsts = new Set<number>();
  const srcs = new Set(copies.map((c) => c[0]));
  const out = new Int32Array(Math.max(1, copies.length) * 2);
  copies.forEach(([src, dst], i) => {
    for (const id of [src, dst]) {
      if (!Number.isInteger(id) || id < 0 || id >= numBlocks) {
        throw new Error(`block copy ${i}: block ${id} outside [0, ${numBlocks})`);
      }
    }
    if (src === dst) throw new Error(`block copy ${i}: src = dst = ${src}`);
    if (dsts.has(dst)) throw new Error(`block copy ${i}: block ${dst} is a destination twice`);
    if (srcs.has(dst)) {
      throw new Error(`block copy ${i}: block ${dst} is both a source and a destination`);
    }
    dsts.add(dst);
    out.set([src, dst], i * 2);
  });
  return out;
}

/** CPU reference: copies of the caches with every pair's block copied. */
export function kvBlockCopyRef(
  pairs: Int32Array,
  numPairs: number,
  kCache: Float32Array,
  vCache: Float32Array,
  blockElems: number,
): { kCache: Float32Array; vCache: Float32Array } {
  const k = new Float32Array(kCache), v = new Float32Array(vCache);
  for (let i = 0; i < numPairs; i++) {
    const src = pairs[i * 2] * blockElems, dst = pairs[i * 2 + 1] * blockElems;
    k.set(kCache.subarray(src, src + blockElems), dst);
    v.set(vCache.subarray(src, src + blockElems), dst);
  }
  return { kCache: k, vCache: v };
}

function copyCase(
  label: string,
  numBlocks: number,
  numPairs: number,
  blockSize: number,
  numKvHeads: number,
  headDim: number,
): KernelCase<typeof params.fields> {
  const blockElems = blockSize * numKvHeads * headDim;
  return {
    label:
      `${label}: ${numPairs} of ${numBlocks} blocks of ${blockSize} x ${numKvHeads} x ${headDim}`,
    params: {
      num_pairs: numPairs,
      block_size: blockSize,
      num_kv_heads: numKvHeads,
      head_dim: headDim,
    },
    inputs: (rng) => {
      const ids = rng.shuffle([...Array(numBlocks).keys()]);
      const copies = Array.from(
        { length: numPairs },
        (_, i) => [ids[i], ids[numPairs + i]] as const,
      );
      return {
        pairs: packBlockCopies(copies, numBlocks),
        k_cache: rng.fillNormal(new Float32Array(numBlocks * blockElems)),
        v_cache: rng.fillNormal(new Float32Array(numBlocks * blockElems)),
      };
    },
    outputs: {},
    reference: (inp) => {
      const r = kvBlockCopyRef(
        inp.pairs as Int32Array,
        numPairs,
        inp.k_cache as Float32Array,
        inp.v_cache as Float32Array,
        blockElems,
      );
      return { k_cache: r.kCache, v_cache: r.vCache };
    },
    tolerance: () => ({ atol: 0, rtol: 0 }),
    bytes: (v) => numPairs * 4 * blockElems * (v.dtype === "f16" ? 2 : 4) + numPairs * 8,
    flops: 0,
  };
}

export const cases: KernelCase<typeof params.fields>[] = [
  copyCase("tiny", 7, 3, 4, 1, 16),
  copyCase("odd heads", 9, 2, 16, 3, 32),
  copyCase("Qwen3-30B-A3B", 4096, 64, 16, 4, 128),
  copyCase("Mixtral-8x7B", 2048, 32, 16, 8, 128),
];
