/**
 * One safetensors file opened for positioned reads: the header is validated at open, and
 * tensor bytes are read on demand (whole, by rows, or by byte range) straight from the
 * file descriptor, so a checkpoint never has to fit in host memory.
 *
 * ```ts
 * const file = SafetensorsFile.open("model.safetensors");
 * const norm = file.read("model.norm.weight"); // Uint8Array of that tensor only
 * const rows = file.readRows("model.embed_tokens.weight", 100, 2); // rows 100 and 101
 * file.close();
 * ```
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import {
  checkSafetensorsHeaderLength,
  parseSafetensorsHeader,
  type SafetensorsHeader,
  type SafetensorsTensorInfo,
} from "./safetensors_header.ts";

/** Largest single readSync call (Node caps one read below 2 GiB). */
const MAX_READ = 1 << 30;

export class SafetensorsFile {
  /** Path the file was opened from (used in every error message). */
  readonly path: string;
  /** The validated header. */
  readonly header: SafetensorsHeader;
  /** Size of the file in bytes. */
  readonly fileSize: number;
  private fd: number | null;

  private constructor(path: string, fd: number, fileSize: number, header: SafetensorsHeader) {
    this.path = path;
    this.fd = fd;
    this.fileSize = fileSize;
    this.header = header;
  }

  /** Opens and validates a file; throws an error naming the file on a bad header. */
  static open(path: string): SafetensorsFile {
    const fd = openSync(path, "r");
    try {
      const stat = fstatSync(fd);
      // a folder opens on Linux, and only its first read fails (EISDIR, naming no file)
      if (!stat.isFile()) throw new Error(`${path}: not a file`);
      const fileSize = stat.size;
      const prefix = new Uint8Array(8);
      if (fileSize >= 8) preadFully(fd, prefix, 0, path);
      const len = checkSafetensorsHeaderLength(prefix, fileSize, path);
      const json = new Uint8Array(len);
      preadFully(fd, json, 8, path);
      const header = parseSafetensorsHeader(json, fileSize, path);
      return new SafetensorsFile(path, fd, fileSize, header);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Tensor names in header order. */
  names(): string[] {
    return [...this.header.tensors.keys()];
  }

  /** True when the file holds a tensor of that name. */
  has(name: string): boolean {
    return this.header.tensors.has(name);
  }

  /** A tensor's header entry; throws an error naming the file and tensor when absent. */
  info(name: string): SafetensorsTensorInfo {
    const info = this.header.tensors.get(name);
    if (!info) throw new Error(`${this.path}: no tensor "${name}"`);
    return info;
  }

  /** Reads a tensor's whole data into a fresh, 8-byte-aligned Uint8Array. */
  read(name: string): Uint8Array {
    const info = this.info(name);
    const out = new Uint8Array(info.byteLength);
    this.readInto(name, out, 0);
    return out;
  }

  /**
   * Reads `dest.length` bytes of a tensor, starting `byteOffset` bytes into its data, into
   * `dest` (e.g. a mapped staging buffer). Throws when the range leaves the tensor.
   */
  readInto(name: string, dest: Uint8Array, byteOffset = 0): void {
    const info = this.info(name);
    if (
      !Number.isSafeInteger(byteOffset) || byteOffset < 0 ||
      byteOffset + dest.length > info.byteLength
    ) {
      throw new Error(
        `${this.path}: tensor "${name}": byte range [${byteOffset}, ${
          byteOffset + dest.length
        }) is outside its ${info.byteLength} bytes`,
      );
    }
    preadFully(this.requireFd(), dest, info.fileOffset + byteOffset, this.path, name);
  }

  /**
   * Reads rows `[rowStart, rowStart + rowCount)` of a tensor (a row is everything after the
   * first dimension), into a fresh Uint8Array.
   */
  readRows(name: string, rowStart: number, rowCount: number): Uint8Array {
    const info = this.info(name);
    const rows = info.shape.length === 0 ? 1 : info.shape[0];
    if (
      !Number.isSafeInteger(rowStart) || !Number.isSafeInteger(rowCount) || rowStart < 0 ||
      rowCount < 0 || rowStart + rowCount > rows
    ) {
      throw new Error(
        `${this.path}: tensor "${name}": rows [${rowStart}, ${
          rowStart + rowCount
        }) outside its ${rows} rows`,
      );
    }
    const rowBytes = rows === 0 ? 0 : info.byteLength / rows;
    const out = new Uint8Array(rowCount * rowBytes);
    this.readInto(name, out, rowStart * rowBytes);
    return out;
  }

  /**
   * Yields a tensor's data in chunks of at most `chunkBytes` bytes, each a fresh array with
   * its byte offset into the tensor, so large tensors can be streamed.
   */
  *chunks(name: string, chunkBytes: number): Generator<{ offset: number; bytes: Uint8Array }> {
    const info = this.info(name);
    if (!(chunkBytes > 0)) throw new Error(`${this.path}: chunk size ${chunkBytes} must be > 0`);
    for (let offset = 0; offset < info.byteLength; offset += chunkBytes) {
      const bytes = new Uint8Array(Math.min(chunkBytes, info.byteLength - offset));
      this.readInto(name, bytes, offset);
      yield { offset, bytes };
    }
  }

  /** Closes the file descriptor; later reads throw. */
  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private requireFd(): number {
    if (this.fd === null) throw new Error(`${this.path}: read after close`);
    return this.fd;
  }
}

function preadFully(
  fd: number,
  dest: Uint8Array,
  position: number,
  path: string,
  tensor?: string,
): void {
  let done = 0;
  while (done < dest.length) {
    const n = readSync(fd, dest, done, Math.min(MAX_READ, dest.length - done), position + done);
    if (n <= 0) {
      const what = tensor === undefined ? "" : ` tensor "${tensor}":`;
      throw new Error(`${path}:${what} unexpected end of file at byte ${position + done}`);
    }
    done += n;
  }
}
