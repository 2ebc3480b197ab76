/**
 * A Hugging Face checkpoint's tensors: one `model.safetensors`, or shards listed by
 * `model.safetensors.index.json` (`weight_map`: tensor name -> shard file). Every shard's
 * header is validated at open; tensor bytes are read on demand with positioned reads.
 *
 * ```ts
 * const ckpt = Checkpoint.open("fixtures/out/tiny-qwen3");
 * const w = ckpt.readF32("model.norm.weight");
 * ckpt.close();
 * ```
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SafetensorsFile } from "./safetensors_file.ts";
import type { SafetensorsTensorInfo } from "./safetensors_header.ts";
import { type F16Overflow, isFloatDtype, tensorToF16Bits, tensorToF32 } from "./tensor_convert.ts";

/** Name of the single-file checkpoint. */
export const SAFETENSORS_SINGLE_FILE = "model.safetensors";
/** Name of the shard index. */
export const SAFETENSORS_INDEX_FILE = "model.safetensors.index.json";

export class Checkpoint {
  /** The checkpoint directory. */
  readonly dir: string;
  private readonly files: readonly SafetensorsFile[];
  private readonly owner: ReadonlyMap<string, SafetensorsFile>;

  private constructor(dir: string, files: SafetensorsFile[], owner: Map<string, SafetensorsFile>) {
    this.dir = dir;
    this.files = files;
    this.owner = owner;
  }

  /**
   * Opens a checkpoint directory: the shard index when present, else `model.safetensors`.
   * Throws an error naming the file when neither exists, a shard is missing or invalid, a
   * tensor the index names is absent from its shard, or a tensor appears in two shards.
   */
  static open(dir: string): Checkpoint {
    const indexPath = join(dir, SAFETENSORS_INDEX_FILE);
    const singlePath = join(dir, SAFETENSORS_SINGLE_FILE);
    if (existsSync(indexPath)) return Checkpoint.openSharded(dir, indexPath);
    if (existsSync(singlePath)) {
      const file = SafetensorsFile.open(singlePath);
      const owner = new Map<string, SafetensorsFile>();
      for (const name of file.names()) owner.set(name, file);
      return new Checkpoint(dir, [file], owner);
    }
    throw new Error(`${dir}: no ${SAFETENSORS_SINGLE_FILE} or ${SAFETENSORS_INDEX_FILE}`);
  }

  private static openSharded(dir: string, indexPath: string): Checkpoint {
    let index: unknown;
    try {
      index = JSON.parse(readFileSync(indexPath, "utf8"));
    } catch (err) {
      throw new Error(`${indexPath}: not valid JSON: ${(err as Error).message}`);
    }
    const weightMap = (index as { weight_map?: unknown })?.weight_map;
    if (weightMap === null || typeof weightMap !== "object" || Array.isArray(weightMap)) {
      throw new Error(`${indexPath}: missing "weight_map" object`);
    }
    const byShard = new Map<string, string[]>();
    for (const [name, shard] of Object.entries(weightMap as Record<string, unknown>)) {
      if (
        typeof shard !== "string" || shard === "" || shard === "." || shard === ".." ||
        shard.includes("/") || shard.includes("\\")
      ) {
        throw new Error(`${indexPath}: tensor "${name}" maps to a bad shard name ${shard}`);
      }
      const names = byShard.get(shard) ?? [];
      names.push(name);
      byShard.set(shard, names);
    }
    const files: SafetensorsFile[] = [];
    const owner = new Map<string, SafetensorsFile>();
    try {
      for (const shard of [...byShard.keys()].sort()) {
        const path = join(dir, shard);
        if (!existsSync(path)) {
          throw new Error(
            `${indexPath}: shard ${shard} (tensor "${byShard.get(shard)![0]}") not found`,
          );
        }
        const file = SafetensorsFile.open(path);
        files.push(file);
        for (const name of byShard.get(shard)!) {
          if (!file.has(name)) {
            throw new Error(
              `${path}: tensor "${name}" listed in ${SAFETENSORS_INDEX_FILE} is absent`,
            );
          }
        }
        for (const name of file.names()) {
          const other = owner.get(name);
          if (other) throw new Error(`${path}: tensor "${name}" also in ${other.path}`);
          owner.set(name, file);
        }
      }
    } catch (err) {
      for (const f of files) f.close();
      throw err;
    }
    return new Checkpoint(dir, files, owner);
  }

  /** Every tensor name, sorted. */
  names(): string[] {
    return [...this.owner.keys()].sort();
  }

  /** True when some shard holds the tensor. */
  has(name: string): boolean {
    return this.owner.has(name);
  }

  /** A tensor's header entry; throws an error naming the tensor when absent. */
  info(name: string): SafetensorsTensorInfo {
    return this.file(name).info(name);
  }

  /** Path of the shard that holds a tensor. */
  pathOf(name: string): string {
    return this.file(name).path;
  }

  /** A tensor's raw bytes. */
  read(name: string): Uint8Array {
    return this.file(name).read(name);
  }

  /** Reads part of a tensor's bytes into `dest`, from `byteOffset` into its data. */
  readInto(name: string, dest: Uint8Array, byteOffset = 0): void {
    this.file(name).readInto(name, dest, byteOffset);
  }

  /** Raw bytes of rows `[rowStart, rowStart + rowCount)` (first dimension). */
  readRows(name: string, rowStart: number, rowCount: number): Uint8Array {
    return this.file(name).readRows(name, rowStart, rowCount);
  }

  /** Streams a tensor's bytes in chunks of at most `chunkBytes`. */
  chunks(name: string, chunkBytes: number): Generator<{ offset: number; bytes: Uint8Array }> {
    return this.file(name).chunks(name, chunkBytes);
  }

  /** A float tensor (F32/F16/BF16) converted to f32. */
  readF32(name: string): Float32Array {
    const file = this.file(name);
    const { dtype } = file.info(name);
    if (!isFloatDtype(dtype)) {
      throw new Error(`${file.path}: tensor "${name}" has dtype ${dtype}, not F32/F16/BF16`);
    }
    return tensorToF32(file.read(name), dtype);
  }

  /**
   * A float tensor converted to f16 bits, with the count and largest magnitude of values
   * that overflow f16 (to report, not to hide).
   */
  readF16Bits(name: string): { bits: Uint16Array; overflow: F16Overflow } {
    const file = this.file(name);
    const { dtype } = file.info(name);
    if (!isFloatDtype(dtype)) {
      throw new Error(`${file.path}: tensor "${name}" has dtype ${dtype}, not F32/F16/BF16`);
    }
    return tensorToF16Bits(file.read(name), dtype);
  }

  /** Closes every shard. */
  close(): void {
    for (const f of this.files) f.close();
  }

  private file(name: string): SafetensorsFile {
    const f = this.owner.get(name);
    if (!f) throw new Error(`${this.dir}: checkpoint has no tensor "${name}"`);
    return f;
  }
}
