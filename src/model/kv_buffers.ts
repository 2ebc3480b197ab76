/**
 * The paged KV cache on the GPU: per layer a K and a V range of
 * `[num_blocks, block_size, kv_heads, head_dim]` in the storage type, each a buffer of its own or
 * a range of a few arenas (buffer_ranges.ts). The block manager (src/kv) decides which block
 * holds what; this only owns the memory.
 *
 * ```ts
 * const kv = await KvBuffers.allocate(gpu, config, "f16", { blockSize: 16, numBlocks: 4096 });
 * kv.layers[0].k; // { buffer, offset, size }: bind it as it is
 * ```
 */
import type { Gpu } from "../gpu/device.ts";
import { allocateRanges, type BufferRange, type Placement } from "../gpu/buffer_ranges.ts";
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
    readonly layers: readonly { readonly k: BufferRange; readonly v: BufferRange }[],
    private readonly buffers: readonly GPUBuffer[],
    /** A buffer a layer's K and V, or ranges of a few arenas. */
    readonly placement: Placement,
  ) {}

  /**
   * Allocates `numBlocks` blocks per layer (block 0 is the null block of the manager), a
   * buffer each K and V or, `placement` "arena", ranges of a few arenas. Throws a clear error
   * when a layer's range exceeds the binding limit or memory runs out.
   */
  static async allocate(
    gpu: Gpu,
    config: ModelConfig,
    dtype: StorageDtype,
    geometry: { blockSize: number; numBlocks: number },
    placement: Placement = "each",
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
    const size = Math.ceil(layerBytes / 16) * 16;
    const requests = [];
    for (let l = 0; l < config.numLayers; l++) {
      requests.push({ label: `kv.k.${l}`, size }, { label: `kv.v.${l}`, size });
    }
    const { ranges, buffers } = await allocateRanges(
      gpu,
      requests,
      placement,
      () =>
        new Error(
          `kv cache: out of GPU memory for ${numBlocks} blocks (${
            (2 * layerBytes * config.numLayers / 2 ** 30).toFixed(2)
          } GiB); ask for fewer (--kv-cache-gb)`,
        ),
      "kv arena",
    );
    const layers = Array.from(
      { length: config.numLayers },
      (_, l) => ({ k: ranges[2 * l], v: ranges[2 * l + 1] }),
    );
    return new KvBuffers(
      blockSize,
      numBlocks,
      2 * layerBytes * config.numLayers,
      layers,
      buffers,
      placement,
    );
  }

  /** Frees the cache. */
  destroy(): void {
    for (const b of this.buffers) b.destroy();
  }
}
