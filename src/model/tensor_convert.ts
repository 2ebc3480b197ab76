/**
 * Converts raw checkpoint tensor bytes (F32, F16 or BF16, little-endian) to the storage
 * types the model uses: f32 values, or f16 bits with a report of values that overflow f16
 * (so the loader can say so instead of silently uploading infinities).
 *
 * ```ts
 * const { bits, overflow } = tensorToF16Bits(bytes, "BF16");
 * if (overflow.count > 0) console.warn(`${overflow.count} values above f16 max, max |x| ${overflow.maxAbs}`);
 * ```
 */
import {
  bf16BitsToF32,
  F16_MAX,
  f16BitsToF32,
  f16ToF32,
  f32ToBf16,
  f32ToF16,
} from "../util/f16.ts";
import type { SafetensorsDtype } from "./safetensors_header.ts";

/** The float dtypes a checkpoint's weights may have. */
export type FloatDtype = "F32" | "F16" | "BF16";

/** Values that did not fit f16 during a conversion. */
export interface F16Overflow {
  /** Finite inputs whose f16 rounding is +-Infinity. */
  count: number;
  /** Largest absolute finite input seen (0 when the tensor is empty). */
  maxAbs: number;
}

/** True when a dtype is one of the float weight dtypes. */
export function isFloatDtype(dtype: SafetensorsDtype | string): dtype is FloatDtype {
  return dtype === "F32" || dtype === "F16" || dtype === "BF16";
}

/** Bytes per element of a float dtype. */
export function floatDtypeBytes(dtype: FloatDtype): number {
  return dtype === "F32" ? 4 : 2;
}

/**
 * Converts F32/F16/BF16 bytes to f32 values. F32 bytes that span a whole ArrayBuffer are
 * viewed, not copied (the result shares their memory); every other case is a fresh array.
 */
export function tensorToF32(bytes: Uint8Array, dtype: SafetensorsDtype): Float32Array {
  switch (dtype) {
    case "F32":
      return new Float32Array(wholeBuffer(bytes, 4));
    case "F16":
      return f16BitsToF32(new Uint16Array(wholeBuffer(bytes, 2)));
    case "BF16":
      return bf16BitsToF32(new Uint16Array(wholeBuffer(bytes, 2)));
    default:
      throw new Error(`cannot convert dtype ${dtype} to f32 (expected F32, F16 or BF16)`);
  }
}

/**
 * Converts F32/F16/BF16 bytes to f16 bits (round to nearest even), counting values that
 * overflow to infinity. F16 input passes through unchanged (viewed, not copied, when its
 * bytes span a whole ArrayBuffer).
 */
export function tensorToF16Bits(
  bytes: Uint8Array,
  dtype: SafetensorsDtype,
): { bits: Uint16Array; overflow: F16Overflow } {
  if (dtype === "F16") {
    const bits = new Uint16Array(wholeBuffer(bytes, 2));
    let maxAbs = 0;
    for (let i = 0; i < bits.length; i++) {
      if ((bits[i] & 0x7c00) === 0x7c00) continue;
      const v = Math.abs(f16ToF32(bits[i]));
      if (v > maxAbs) maxAbs = v;
    }
    return { bits, overflow: { count: 0, maxAbs } };
  }
  const values = tensorToF32(bytes, dtype);
  const bits = new Uint16Array(values.length);
  const overflow: F16Overflow = { count: 0, maxAbs: 0 };
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    const h = f32ToF16(v);
    bits[i] = h;
    if (!Number.isFinite(v)) continue;
    const a = Math.abs(v);
    if (a > overflow.maxAbs) overflow.maxAbs = a;
    if (a > F16_MAX && (h & 0x7fff) === 0x7c00) overflow.count++;
  }
  return { bits, overflow };
}

/** Adds one conversion's overflow report into a running total. */
export function mergeF16Overflow(into: F16Overflow, add: F16Overflow): F16Overflow {
  into.count += add.count;
  into.maxAbs = Math.max(into.maxAbs, add.maxAbs);
  return into;
}

/** Encodes f32 values as bytes of a float dtype (rounding to nearest even). */
export function f32ToTensorBytes(values: Float32Array, dtype: FloatDtype): Uint8Array {
  if (dtype === "F32") return new Uint8Array(values.slice().buffer);
  const bits = new Uint16Array(values.length);
  if (dtype === "F16") {
    for (let i = 0; i < values.length; i++) bits[i] = f32ToF16(values[i]);
  } else {
    for (let i = 0; i < values.length; i++) bits[i] = f32ToBf16(values[i]);
  }
  return new Uint8Array(bits.buffer);
}

/** The bytes as a whole ArrayBuffer (no copy when they already are one). */
function wholeBuffer(bytes: Uint8Array, align: number): ArrayBuffer {
  if (bytes.length % align !== 0) {
    throw new Error(`tensor byte length ${bytes.length} is not a multiple of ${align}`);
  }
  if (
    bytes.buffer instanceof ArrayBuffer && bytes.byteOffset === 0 &&
    bytes.byteLength === bytes.buffer.byteLength
  ) {
    return bytes.buffer;
  }
  return bytes.slice().buffer;
}
