/**
 * The model's weights on the GPU, in the layout the kernels read: per layer a fused q|k|v
 * projection, o, norms, and either the experts (gate|up fused per expert, down) with the
 * router, or a dense gate|up and down. Filled from a checkpoint by streaming tensors in
 * chunks (never the whole file in host memory), or drawn on the GPU for synthetic models.
 *
 * ```ts
 * const weights = await GpuWeights.fromCheckpoint(gpu, config, Checkpoint.open(dir), "f16");
 * const synthetic = await GpuWeights.synthetic(gpu, syntheticConfig("synthetic:qwen3-30b-a3b"), "f16");
 * ```
 */
import {
  EXPERT_TILE_ROWS,
  moeExpertsFitTiles,
  tileExpertMatrices,
} from "../../kernels/expert_tiles.ts";
import { paced } from "../gpu/event_pacing.ts";
import { ModelOptionError } from "./model_option_error.ts";
import type { Gpu } from "../gpu/device.ts";
import { writeBuffer } from "../gpu/buffers.ts";
import { allocateRanges, type BufferRange, type Placement } from "../gpu/buffer_ranges.ts";
import * as fillRandom from "../../kernels/fill_random.ts";
import { KernelCall } from "./kernel_call.ts";
import { submitRandomFill } from "./random_fill.ts";
import type { Checkpoint } from "./checkpoint.ts";
import type { ModelConfig } from "./config.ts";
import {
  attentionTensorNames,
  checkCheckpointTensors,
  denseMlpTensorNames,
  EMBED_TENSOR,
  expertTensorNames,
  FINAL_NORM_TENSOR,
  lmHeadTensorName,
  routerTensorName,
} from "./model_tensors.ts";
import {
  type F16Overflow,
  mergeF16Overflow,
  tensorToF16Bits,
  tensorToF32,
} from "./tensor_convert.ts";

/** Storage type of weights and KV on the GPU. */
export type StorageDtype = "f16" | "f32";

/** How GpuWeights lays its weights out and places them. */
export interface WeightOptions {
  /** The MoE expert weights in tiles (kernels/expert_tiles.ts); default false. */
  readonly expertTiles?: boolean;
  /**
   * A buffer a weight (fused pieces together), or every weight a range of a few arenas of at
   * most 16 GiB (buffer_ranges.ts; four for Qwen3-30B-A3B's 57 GiB of f16); default "each".
   * A question for the driver: whether it maps a few large allocations in larger pages than
   * many of 0.5-0.8 GB (each layer's first read of its weights is slow; `probe-reads
   * --placement arena` asks it of the loads alone).
   */
  readonly placement?: Placement;
}

/**
 * One layer's weights (shapes in the comments, Linear layout [out, in]), each a buffer of its
 * own (offset 0) or a range of an arena, bound as it is.
 */
export interface LayerWeights {
  readonly kind: "moe" | "dense";
  readonly inputNorm: BufferRange; // [hidden]
  readonly postNorm: BufferRange; // [hidden]
  readonly qkv: BufferRange; // [(heads + 2 kv_heads) * head_dim, hidden]
  readonly o: BufferRange; // [hidden, heads * head_dim]
  readonly qNorm: BufferRange | null; // [head_dim]
  readonly kNorm: BufferRange | null; // [head_dim]
  readonly router: BufferRange | null; // [experts, hidden]
  readonly gateUp: BufferRange; // moe: [experts, 2 * inter, hidden]; dense: [2 * inter, hidden]
  readonly down: BufferRange; // moe: [experts, hidden, inter]; dense: [hidden, inter]
}

/** A piece of a fused buffer: which tensor fills it, at which byte offset, with what scale. */
interface Piece {
  readonly tensor: string;
  readonly offset: number;
  readonly elements: number;
  /** Synthetic fill: base + scale * unit-variance noise. */
  readonly base: number;
  readonly scale: number;
  /** An expert matrix stored in tiles (kernels/expert_tiles.ts): its columns. */
  readonly tileCols?: number;
}

interface BufferPlan {
  readonly label: string;
  readonly elements: number;
  readonly pieces: Piece[];
}

/** All weights of a model on the GPU. */
export class GpuWeights {
  private constructor(
    readonly config: ModelConfig,
    readonly dtype: StorageDtype,
    readonly embed: BufferRange,
    readonly finalNorm: BufferRange,
    readonly lmHead: BufferRange,
    readonly layers: readonly LayerWeights[],
    /** Total bytes of weight buffers. */
    readonly bytes: number,
    /** Values that did not fit f16 (inf after conversion), summed over tensors. */
    readonly f16Overflow: F16Overflow,
    private readonly buffers: GPUBuffer[],
    /** The MoE expert weights are stored in tiles (kernels/expert_tiles.ts). */
    readonly expertTiles: boolean,
    /** How the weights take GPU memory. */
    readonly placement: Placement,
  ) {}

  /** Streams every tensor of a checkpoint into GPU buffers (converted to `dtype`). */
  static async fromCheckpoint(
    gpu: Gpu,
    config: ModelConfig,
    ckpt: Checkpoint,
    dtype: StorageDtype,
    { expertTiles = false, placement = "each", onProgress }: WeightOptions & {
      onProgress?: (doneBytes: number, totalBytes: number) => void;
    } = {},
  ): Promise<GpuWeights> {
    checkCheckpointTensors(config, ckpt);
    const overflow: F16Overflow = { count: 0, maxAbs: 0 };
    return await build(gpu, config, dtype, overflow, expertTiles, placement, async (at, plan) => {
      for (const piece of plan.pieces) {
        await uploadTensor(gpu, ckpt, piece, at, dtype, overflow);
        onProgress?.(piece.elements, 0);
      }
    });
  }

  /** Draws every weight on the GPU (deterministic per tensor name): no host traffic. */
  static async synthetic(
    gpu: Gpu,
    config: ModelConfig,
    dtype: StorageDtype,
    { expertTiles = false, placement = "each" }: WeightOptions = {},
  ): Promise<GpuWeights> {
    const fill = await KernelCall.create(gpu, fillRandom.spec, [dtype]);
    const overflow: F16Overflow = { count: 0, maxAbs: 0 };
    let queued = 0;
    // (the noise is drawn per stored position: in tiles the experts get other, equally random,
    // weights than row by row)
    try {
      const weights = await build(
        gpu,
        config,
        dtype,
        overflow,
        expertTiles,
        placement,
        async (at, plan) => {
          for (const piece of plan.pieces) {
            submitRandomFill(gpu, fill, dtype, at, {
              offset: piece.offset / (dtype === "f16" ? 2 : 4),
              count: piece.elements,
              seed: seedOf(piece.tensor),
              base: piece.base,
              scale: piece.scale,
            });
            queued += piece.elements;
            if (queued > 1 << 28) {
              await paced(gpu.device.queue.onSubmittedWorkDone());
              queued = 0;
            }
          }
        },
      );
      await paced(gpu.device.queue.onSubmittedWorkDone());
      return weights;
    } finally {
      fill.destroy(); // its params buffer, on success and when the draw fails
    }
  }

  /** GPU buffers the weights take (one a weight, or the arenas). */
  get bufferCount(): number {
    return this.buffers.length;
  }

  /** Frees every weight buffer. */
  destroy(): void {
    for (const b of this.buffers) b.destroy();
  }

  /** Internal: assembled by build(). */
  static assemble(
    config: ModelConfig,
    dtype: StorageDtype,
    parts: {
      embed: BufferRange;
      finalNorm: BufferRange;
      lmHead: BufferRange;
      layers: LayerWeights[];
      bytes: number;
      overflow: F16Overflow;
      buffers: GPUBuffer[];
      expertTiles: boolean;
      placement: Placement;
    },
  ): GpuWeights {
    return new GpuWeights(
      config,
      dtype,
      parts.embed,
      parts.finalNorm,
      parts.lmHead,
      parts.layers,
      parts.bytes,
      parts.overflow,
      parts.buffers,
      parts.expertTiles,
      parts.placement,
    );
  }
}

/** FNV-1a of a tensor name: its synthetic seed. */
function seedOf(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** The buffers of a model, their fused pieces, and the fill callback that writes them. */
async function build(
  gpu: Gpu,
  config: ModelConfig,
  dtype: StorageDtype,
  overflow: F16Overflow,
  expertTiles: boolean,
  placement: Placement,
  fill: (at: BufferRange, plan: BufferPlan) => Promise<void>,
): Promise<GpuWeights> {
  if (
    expertTiles &&
    (dtype !== "f16" || !moeExpertsFitTiles(config.hiddenSize, config.moeIntermediateSize))
  ) {
    throw new ModelOptionError(
      `weights: expert weights in tiles need f16 and hidden and expert width multiples of 64 (have ${dtype}, ${config.hiddenSize}, ${config.moeIntermediateSize})`,
    );
  }
  const es = dtype === "f16" ? 2 : 4;
  const H = config.hiddenSize, hd = config.headDim;
  const qRows = config.numHeads * hd, kvRows = config.numKvHeads * hd;
  const maxBinding = gpu.limits.maxStorageBufferBindingSize;

  // 1. every weight's plan, in order, and the slot its place goes to (filled in 2.)
  const plans: BufferPlan[] = [];
  const slots: { buffer: GPUBuffer; offset: number; size: number }[] = [];
  const make = (plan: BufferPlan): BufferRange => {
    const size = Math.max(16, Math.ceil((plan.elements * es) / 16) * 16);
    if (size > maxBinding) {
      throw new Error(
        `weights: ${plan.label} needs ${size} bytes, over this adapter's ${maxBinding}-byte binding limit`,
      );
    }
    const slot = { buffer: undefined as unknown as GPUBuffer, offset: 0, size };
    plans.push(plan);
    slots.push(slot);
    return slot;
  };
  const single = (
    label: string,
    tensor: string,
    elements: number,
    base: number,
    scale: number,
  ): BufferPlan => ({ label, elements, pieces: [{ tensor, offset: 0, elements, base, scale }] });
  const linear = (fanIn: number) => 1 / Math.sqrt(fanIn);

  const embed = make(single(EMBED_TENSOR, EMBED_TENSOR, config.vocabSize * H, 0, 1));
  const layers: LayerWeights[] = [];
  for (let l = 0; l < config.numLayers; l++) {
    const a = attentionTensorNames(config, l);
    const qkvPieces: Piece[] = [
      { tensor: a.q, offset: 0, elements: qRows * H, base: 0, scale: linear(H) },
      { tensor: a.k, offset: qRows * H * es, elements: kvRows * H, base: 0, scale: linear(H) },
      {
        tensor: a.v,
        offset: (qRows + kvRows) * H * es,
        elements: kvRows * H,
        base: 0,
        scale: linear(H),
      },
    ];
    const inputNorm = make(single(a.inputNorm, a.inputNorm, H, 1, 0));
    const qkv = make({
      label: `model.layers.${l}.qkv`,
      elements: (qRows + 2 * kvRows) * H,
      pieces: qkvPieces,
    });
    const o = make(single(a.o, a.o, H * qRows, 0, linear(qRows)));
    const qNorm = a.qNorm ? make(single(a.qNorm, a.qNorm, hd, 1, 0)) : null;
    const kNorm = a.kNorm ? make(single(a.kNorm, a.kNorm, hd, 1, 0)) : null;
    const postNorm = make(single(a.postAttentionNorm, a.postAttentionNorm, H, 1, 0));
    const kind = config.layerKinds[l];
    if (kind === "moe") {
      const E = config.numExperts, I = config.moeIntermediateSize;
      const gu = expertTiles ? H : undefined;
      const dn = expertTiles ? I : undefined;
      const router = make(
        single(routerTensorName(config, l), routerTensorName(config, l), E * H, 0, linear(H)),
      );
      const gateUpPieces: Piece[] = [];
      const downPieces: Piece[] = [];
      for (let e = 0; e < E; e++) {
        const t = expertTensorNames(config, l, e);
        const base = e * 2 * I * H * es;
        // in tiles the gate rows and the up rows are whole bands of the expert's matrix, at the
        // same places as row by row
        gateUpPieces.push(
          {
            tensor: t.gate,
            offset: base,
            elements: I * H,
            base: 0,
            scale: linear(H),
            tileCols: gu,
          },
          {
            tensor: t.up,
            offset: base + I * H * es,
            elements: I * H,
            base: 0,
            scale: linear(H),
            tileCols: gu,
          },
        );
        downPieces.push({
          tensor: t.down,
          offset: e * H * I * es,
          elements: H * I,
          base: 0,
          scale: linear(I),
          tileCols: dn,
        });
      }
      const gateUp = make({
        label: `model.layers.${l}.experts.gate_up`,
        elements: E * 2 * I * H,
        pieces: gateUpPieces,
      });
      const down = make({
        label: `model.layers.${l}.experts.down`,
        elements: E * H * I,
        pieces: downPieces,
      });
      layers.push({ kind, inputNorm, postNorm, qkv, o, qNorm, kNorm, router, gateUp, down });
    } else {
      const I = config.intermediateSize;
      const t = denseMlpTensorNames(l);
      const gateUp = make({
        label: `model.layers.${l}.mlp.gate_up`,
        elements: 2 * I * H,
        pieces: [
          { tensor: t.gate, offset: 0, elements: I * H, base: 0, scale: linear(H) },
          { tensor: t.up, offset: I * H * es, elements: I * H, base: 0, scale: linear(H) },
        ],
      });
      const down = make(single(t.down, t.down, H * I, 0, linear(I)));
      layers.push({
        kind,
        inputNorm,
        postNorm,
        qkv,
        o,
        qNorm,
        kNorm,
        router: null,
        gateUp,
        down,
      });
    }
  }
  const finalNorm = make(single(FINAL_NORM_TENSOR, FINAL_NORM_TENSOR, H, 1, 0));
  const lmHead = config.tieWordEmbeddings ? embed : make(
    single(lmHeadTensorName(config), lmHeadTensorName(config), config.vocabSize * H, 0, linear(H)),
  );

  // 2. where each lies, 3. filled in order
  const { ranges, buffers, bytes } = await allocateRanges(
    gpu,
    plans.map((plan, i) => ({ label: plan.label, size: slots[i].size })),
    placement,
    (label, size, before) =>
      new Error(
        `weights: out of GPU memory allocating ${label} (${(size / 2 ** 20).toFixed(0)} MiB) ` +
          `after ${(before / 2 ** 30).toFixed(2)} GiB of weights`,
      ),
    "weights arena",
  );
  ranges.forEach((r, i) => Object.assign(slots[i], r));
  try {
    for (let i = 0; i < plans.length; i++) await fill(slots[i], plans[i]);
  } catch (err) {
    // (a checkpoint that fails to read: nothing of the model stays allocated)
    for (const b of buffers) b.destroy();
    throw err;
  }
  return GpuWeights.assemble(config, dtype, {
    embed,
    finalNorm,
    lmHead,
    layers,
    bytes,
    overflow,
    buffers,
    expertTiles,
    placement,
  });
}

const CHUNK_BYTES = 8 * 2 ** 20;

/** Streams one tensor into its weight's place at the piece's offset, chunk by chunk. */
async function uploadTensor(
  gpu: Gpu,
  ckpt: Checkpoint,
  piece: Piece,
  at: BufferRange,
  dtype: StorageDtype,
  overflow: F16Overflow,
): Promise<void> {
  const info = ckpt.info(piece.tensor);
  if (info.numel !== piece.elements) {
    throw new Error(
      `weights: ${piece.tensor} has ${info.numel} elements, the model expects ${piece.elements}`,
    );
  }
  const es = dtype === "f16" ? 2 : 4;
  const srcBytes = info.byteLength / info.numel;
  // in tiles: whole bands of 16 rows a chunk, each band reordered on its own
  const band = piece.tileCols ? EXPERT_TILE_ROWS * piece.tileCols * srcBytes : 0;
  const chunkBytes = band ? Math.max(1, Math.floor(CHUNK_BYTES / band)) * band : CHUNK_BYTES;
  for (const chunk of ckpt.chunks(piece.tensor, chunkBytes)) {
    const firstElement = chunk.offset / srcBytes;
    let data: Uint16Array | Float32Array;
    if (dtype === "f16") {
      const converted = tensorToF16Bits(chunk.bytes, info.dtype);
      mergeF16Overflow(overflow, converted.overflow);
      data = converted.bits;
    } else {
      data = tensorToF32(chunk.bytes, info.dtype);
    }
    if (piece.tileCols) data = tileExpertMatrices(data, EXPERT_TILE_ROWS, piece.tileCols);
    writeBuffer(gpu.device, at.buffer, at.offset + piece.offset + firstElement * es, data);
  }
  await paced(gpu.device.queue.onSubmittedWorkDone());
}
