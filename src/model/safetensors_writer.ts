/**
 * A streaming safetensors writer. The tensor list (names, dtypes, shapes) is declared up
 * front, so the header, with every offset, is written first; tensor data then follows in
 * declaration order, whole or in chunks, and never needs to be held all at once. Output is
 * deterministic: tensors in the given order, `__metadata__` first, the header padded with
 * spaces to a multiple of 8 bytes. The file appears under its name only when complete
 * (written to `path + ".partial"`, renamed by `close`).
 *
 * ```ts
 * const w = SafetensorsWriter.create("out.safetensors", [
 *   { name: "a", dtype: "F32", shape: [2] },
 * ]);
 * w.write(new Uint8Array(new Float32Array([1, 2]).buffer));
 * w.close();
 * ```
 */
import { closeSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { SAFETENSORS_DTYPE_BYTES, type SafetensorsDtype } from "./safetensors_header.ts";

/** One tensor to be written. */
export interface SafetensorsTensorSpec {
  readonly name: string;
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
}

/** Builds the header bytes (length prefix + padded JSON) for tensors laid out in order. */
export function encodeSafetensorsHeader(
  tensors: readonly SafetensorsTensorSpec[],
  metadata: Readonly<Record<string, string>> = {},
): Uint8Array {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = { ...metadata };
  let offset = 0;
  for (const t of tensors) {
    if (t.name === "__metadata__" || Object.hasOwn(header, t.name)) {
      throw new Error(`safetensors writer: duplicate or reserved tensor name "${t.name}"`);
    }
    if (!Object.hasOwn(SAFETENSORS_DTYPE_BYTES, t.dtype)) {
      throw new Error(`safetensors writer: tensor "${t.name}" has unknown dtype ${t.dtype}`);
    }
    if (!t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new Error(`safetensors writer: tensor "${t.name}" has bad shape [${t.shape}]`);
    }
    const bytes = t.shape.reduce((a, d) => a * d, 1) * SAFETENSORS_DTYPE_BYTES[t.dtype];
    header[t.name] = {
      dtype: t.dtype,
      shape: [...t.shape],
      data_offsets: [offset, offset + bytes],
    };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  const jsonBytes = new TextEncoder().encode(json).length;
  json += " ".repeat((8 - (jsonBytes % 8)) % 8);
  const body = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + body.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(body.length), true);
  out.set(body, 8);
  return out;
}

export class SafetensorsWriter {
  /** Final path of the file. */
  readonly path: string;
  private readonly tensors: readonly SafetensorsTensorSpec[];
  private readonly sizes: number[];
  private fd: number | null;
  private index = 0;
  private written = 0;

  private constructor(path: string, fd: number, tensors: readonly SafetensorsTensorSpec[]) {
    this.path = path;
    this.fd = fd;
    this.tensors = tensors;
    this.sizes = tensors.map((t) =>
      t.shape.reduce((a, d) => a * d, 1) * SAFETENSORS_DTYPE_BYTES[t.dtype]
    );
  }

  /** Starts a file: validates the specs and writes the header. */
  static create(
    path: string,
    tensors: readonly SafetensorsTensorSpec[],
    metadata: Readonly<Record<string, string>> = {},
  ): SafetensorsWriter {
    const header = encodeSafetensorsHeader(tensors, metadata);
    const fd = openSync(path + ".partial", "w");
    const w = new SafetensorsWriter(path, fd, tensors);
    w.put(header);
    w.skipEmpty();
    return w;
  }

  /** Name of the tensor the next bytes belong to, or null when all are written. */
  get current(): string | null {
    return this.index < this.tensors.length ? this.tensors[this.index].name : null;
  }

  /**
   * Appends bytes of the current tensor (a whole tensor or any chunk of it); moves on to the
   * next tensor once the current one is complete. Bytes may not run past the current tensor.
   */
  write(bytes: Uint8Array): void {
    if (this.index >= this.tensors.length) {
      throw new Error(`${this.path}: write after every tensor was written`);
    }
    const t = this.tensors[this.index];
    const left = this.sizes[this.index] - this.written;
    if (bytes.length > left) {
      throw new Error(
        `${this.path}: tensor "${t.name}" gets ${bytes.length} bytes but only ${left} remain of its ${
          this.sizes[this.index]
        }`,
      );
    }
    this.put(bytes);
    this.written += bytes.length;
    if (this.written === this.sizes[this.index]) {
      this.index++;
      this.written = 0;
      this.skipEmpty();
    }
  }

  /**
   * Writes one whole tensor: `name` must be the current tensor and `bytes` all of its data
   * (a check that catches a short tensor before its bytes spill into the next one).
   */
  writeTensor(name: string, bytes: Uint8Array): void {
    const current = this.current;
    if (current !== name) {
      throw new Error(
        `${this.path}: tensor "${name}" written out of order (expected "${current}")`,
      );
    }
    if (this.written !== 0 || bytes.length !== this.sizes[this.index]) {
      throw new Error(
        `${this.path}: tensor "${name}" needs ${this.sizes[this.index]} bytes, got ${bytes.length}`,
      );
    }
    this.write(bytes);
  }

  /** Finishes the file; throws (and removes the partial file) if a tensor is incomplete. */
  close(): void {
    if (this.fd === null) return;
    closeSync(this.fd);
    this.fd = null;
    if (this.index < this.tensors.length) {
      rmSync(this.path + ".partial", { force: true });
      throw new Error(
        `${this.path}: closed before tensor "${this.tensors[this.index].name}" was complete`,
      );
    }
    renameSync(this.path + ".partial", this.path);
  }

  /** Closes and removes the partial file without producing output. */
  abort(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    rmSync(this.path + ".partial", { force: true });
  }

  private skipEmpty(): void {
    while (this.index < this.tensors.length && this.sizes[this.index] === 0) this.index++;
  }

  private put(bytes: Uint8Array): void {
    if (this.fd === null) throw new Error(`${this.path}: write after close`);
    let done = 0;
    while (done < bytes.length) done += writeSync(this.fd, bytes, done, bytes.length - done);
  }
}

/** Writes a whole file from in-memory tensors (small files, tests). */
export function writeSafetensors(
  path: string,
  tensors: readonly (SafetensorsTensorSpec & { readonly data: Uint8Array })[],
  metadata: Readonly<Record<string, string>> = {},
): void {
  const w = SafetensorsWriter.create(path, tensors, metadata);
  try {
    for (const t of tensors) {
      if (t.data.length > 0 || w.current === t.name) w.writeTensor(t.name, t.data);
    }
    w.close();
  } catch (err) {
    w.abort();
    throw err;
  }
}
