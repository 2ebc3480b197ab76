/**
 * The safetensors header: the format's dtypes and a validating parser.
 *
 * A safetensors file is `u64 LE header length N | N bytes of JSON | byte buffer`. The JSON
 * maps tensor names to `{dtype, shape, data_offsets: [begin, end]}` (offsets relative to the
 * byte buffer) plus an optional `__metadata__` object of strings. Everything is checked here,
 * before any tensor memory is allocated: the length bound, the JSON, known dtypes,
 * shape x dtype size = byte span, spans inside the file and not overlapping.
 *
 * ```ts
 * const header = parseSafetensorsHeader(jsonBytes, fileSize, "model.safetensors");
 * header.tensors.get("model.norm.weight"); // { dtype: "BF16", shape: [64], ... }
 * ```
 */

/** Bytes per element of every safetensors dtype this reader understands. */
export const SAFETENSORS_DTYPE_BYTES = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  I64: 8,
  U64: 8,
  F64: 8,
} as const;

/** A safetensors dtype name, as written in the header. */
export type SafetensorsDtype = keyof typeof SAFETENSORS_DTYPE_BYTES;

/** Largest header accepted (the reference implementation's bound is the same order). */
export const MAX_SAFETENSORS_HEADER_BYTES = 100 * 1024 * 1024;

/** One tensor's entry in a header, with absolute file offsets resolved. */
export interface SafetensorsTensorInfo {
  readonly name: string;
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
  /** Number of elements (product of shape; 1 for a scalar). */
  readonly numel: number;
  /** Byte length of the tensor's data. */
  readonly byteLength: number;
  /** Absolute position of the first data byte in the file. */
  readonly fileOffset: number;
}

/** A parsed and validated header. */
export interface SafetensorsHeader {
  /** Tensors in header order. */
  readonly tensors: ReadonlyMap<string, SafetensorsTensorInfo>;
  /** The `__metadata__` strings, or an empty object. */
  readonly metadata: Readonly<Record<string, string>>;
  /** Absolute file offset of the byte buffer (8 + header length). */
  readonly dataOffset: number;
}

/** True when `name` is a dtype this reader knows. */
export function isSafetensorsDtype(name: unknown): name is SafetensorsDtype {
  return typeof name === "string" && Object.hasOwn(SAFETENSORS_DTYPE_BYTES, name);
}

/**
 * Checks the 8-byte length prefix against the bound and the file size and returns the
 * header length. `file` names the file in errors.
 */
export function checkSafetensorsHeaderLength(
  prefix: Uint8Array,
  fileSize: number,
  file: string,
): number {
  if (fileSize < 8 || prefix.length < 8) {
    throw new Error(`${file}: not a safetensors file (${fileSize} bytes, shorter than 8)`);
  }
  const view = new DataView(prefix.buffer, prefix.byteOffset, 8);
  const n = view.getBigUint64(0, true);
  if (n > BigInt(MAX_SAFETENSORS_HEADER_BYTES)) {
    throw new Error(
      `${file}: safetensors header length ${n} exceeds the ${MAX_SAFETENSORS_HEADER_BYTES}-byte bound`,
    );
  }
  const len = Number(n);
  if (len < 2) throw new Error(`${file}: safetensors header length ${len} is too small`);
  if (8 + len > fileSize) {
    throw new Error(
      `${file}: safetensors header length ${len} runs past the end of the file (${fileSize} bytes)`,
    );
  }
  return len;
}

/**
 * Parses and validates the JSON header. `fileSize` is the whole file's size; `file` names
 * the file in errors. Throws on the first problem found.
 */
export function parseSafetensorsHeader(
  json: Uint8Array,
  fileSize: number,
  file: string,
): SafetensorsHeader {
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(json));
  } catch (err) {
    throw new Error(
      `${file}: safetensors header is not valid UTF-8 JSON: ${(err as Error).message}`,
    );
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new Error(`${file}: safetensors header is not a JSON object`);
  }
  const dataOffset = 8 + json.length;
  const bufferSize = fileSize - dataOffset;
  const tensors = new Map<string, SafetensorsTensorInfo>();
  let metadata: Record<string, string> = {};
  const spans: [begin: number, end: number, name: string][] = [];

  for (const [name, entry] of Object.entries(parsed as Record<string, unknown>)) {
    if (name === "__metadata__") {
      // the reference reader takes an explicit null as no metadata
      if (entry !== null) metadata = checkMetadata(entry, file);
      continue;
    }
    const where = `${file}: tensor "${name}"`;
    if (entry === null || typeof entry !== "object" || Array.isArray(entry)) {
      throw new Error(`${where}: header entry is not an object`);
    }
    const { dtype, shape, data_offsets: offsets } = entry as Record<string, unknown>;
    if (!isSafetensorsDtype(dtype)) {
      throw new Error(`${where}: unknown dtype ${JSON.stringify(dtype)}`);
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new Error(`${where}: shape ${JSON.stringify(shape)} is not a list of sizes`);
    }
    if (
      !Array.isArray(offsets) || offsets.length !== 2 ||
      !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)
    ) {
      throw new Error(`${where}: data_offsets ${JSON.stringify(offsets)} is not [begin, end]`);
    }
    const [begin, end] = offsets as [number, number];
    if (end < begin) throw new Error(`${where}: data_offsets [${begin}, ${end}] end before begin`);
    const numel = shape.reduce((a: number, d: number) => a * d, 1);
    const byteLength = numel * SAFETENSORS_DTYPE_BYTES[dtype];
    if (!Number.isSafeInteger(byteLength) || byteLength !== end - begin) {
      throw new Error(
        `${where}: shape [${shape}] x ${dtype} is ${byteLength} bytes but data_offsets span ${
          end - begin
        }`,
      );
    }
    if (end > bufferSize) {
      throw new Error(
        `${where}: data_offsets [${begin}, ${end}] run outside the file (byte buffer is ${bufferSize} bytes)`,
      );
    }
    spans.push([begin, end, name]);
    tensors.set(name, {
      name,
      dtype,
      shape: Object.freeze([...shape]),
      numel,
      byteLength,
      fileOffset: dataOffset + begin,
    });
  }

  // Sorted by begin, a span overlaps some earlier one iff it starts before the furthest
  // end seen so far. Empty tensors occupy no bytes and overlap nothing.
  spans.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let reach: [begin: number, end: number, name: string] | null = null;
  for (const span of spans) {
    const [begin, end, name] = span;
    if (end === begin) continue;
    if (reach && begin < reach[1]) {
      throw new Error(
        `${file}: tensor "${name}" [${begin}, ${end}) overlaps tensor "${reach[2]}" [${reach[0]}, ${
          reach[1]
        })`,
      );
    }
    if (!reach || end > reach[1]) reach = span;
  }
  return { tensors, metadata: Object.freeze(metadata), dataOffset };
}

function checkMetadata(entry: unknown, file: string): Record<string, string> {
  if (entry === null || typeof entry !== "object" || Array.isArray(entry)) {
    throw new Error(`${file}: __metadata__ is not an object`);
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(entry as Record<string, unknown>)) {
    if (typeof v !== "string") {
      throw new Error(`${file}: __metadata__ value of "${k}" is not a string`);
    }
    out[k] = v;
  }
  return out;
}
