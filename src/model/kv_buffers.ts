/**
 * The paged KV cache on the GPU: per layer a K and a V buffer of
 * `[num_blocks, block_size, kv_heads, head_dim]` in the storage type. The block manager
 * (src/kv) decides which block holds what; this only owns the memory.
 *
 * ```ts
 * const kv = await KvBuffers.allocate(gpu, config, "f16", { blockSize: 16, numBlocks: 4096 });
 * kv.layers[0].k; // GPUBuffer
 * ```
 */
import type { Gpu } from "../gpu/device.ts";
import { BufferUsage } from "../gpu/device.ts";
import type { ModelConfig } from "./config.ts";
import type { StorageDtype } from "./gpu_weights.ts";

/** Bytes one block takes over all layers, K and V. */
export function kvBlockBytes(config: ModelConfig, dtype: StorageDtype, blockSize: number): number {
  const es = dtype === "f16" ? 2 : 4;
  return 2 * config.numLayers * blockSize * config.numKvHeads * config.headDim * es;
}

export class KvBuffers {
  private constructor(
    readonly blockSize: number,
    readonly numBlocks: number,
    readonly bytes: number,
    readonly layers: readonly { readonly k: GPUBuffer; readonly v: GPUBuffer }[],
  ) {}

  /**
   * Allocates `numBlocks` blocks per layer (block 0 is the null block of the manager).
   * Throws a clear error when a layer's buffer exceeds the binding limit or memory runs out.
   */
  static async allocate(
    gpu: Gpu,
    config: ModelConfig,
    dtype: StorageDtype,
    geometry: { blockSize: number; numBlocks: number },
  ): Promise<KvBuffers> {
    const { blockSize, numBlocks } = geometry;
    if (!Number.isInteger(blockSize) || blockSize < 1 || (blockSize & (blockSize - 1)) !== 0) {
      throw new Error(`kv cache: block size ${blockSize} must be a power of two`);
    }
    if (!Number.isInteger(numBlocks) || numBlocks < 2) {
      throw new Error(`kv cache: ${numBlocks} blocks; at least 2 are needed (block 0 is null)`);
    }
    const layerBytes = kvBlockBytes(config, dtype, blockSize) / (2 * config.numLayers) * numBlocks;
    const limit = gpu.limits.maxStorageBufferBindingSize;
    if (layerBytes > limit) {
      throw new Error(
        `kv cache: ${numBlocks} blocks need ${layerBytes} bytes per layer buffer, over the ` +
          `${limit}-byte binding limit; use at most ${
            Math.floor(numBlocks * limit / layerBytes)
          } blocks`,
      );
    }
    const layers: { k: GPUBuffer; v: GPUBuffer }[] = [];
    gpu.device.pushErrorScope("out-of-memory");
    for (let l = 0; l < config.numLayers; l++) {
      const make = (kv: string) =>
        gpu.device.createBuffer({
          label: `kv.${kv}.${l}`,
          size: Math.ceil(layerBytes / 16) * 16,
          usage: BufferUsage.STORAGE | BufferUsage.COPY_DST | BufferUsage.COPY_SRC,
        });
      layers.push({ k: make("k"), v: make("v") });
    }
    const oom = await gpu.device.popErrorScope();
    if (oom) {
      for (const l of layers) {
        l.k.destroy();
        l.v.destroy();
      }
      throw new Error(
        `kv cache: out of GPU memory for ${numBlocks} blocks (${
          (2 * layerBytes * config.numLayers / 2 ** 30).toFixed(2)
        } GiB); ask for fewer (--kv-cache-gb)`,
      );
    }
    return new KvBuffers(blockSize, numBlocks, 2 * layerBytes * config.numLayers, layers);
  }

  /** Frees the cache. */
  destroy(): void {
    for (const l of this.layers) {
      l.k.destroy();
      l.v.destroy();
    }
  }
}
