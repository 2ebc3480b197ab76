/**
 * IEEE half (f16) and bfloat16 conversions on plain arrays, for uploads, checkpoint
 * loading and CPU references that must see the same rounding as the GPU.
 *
 * ```ts
 * const bits = f32ToF16Bits(new Float32Array([1, 65504, 1e-8]));
 * const back = f16BitsToF32(bits); // [1, 65504, 0]
 * ```
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Rounds one f32 to the nearest f16 (ties to even) and returns its 16 bits. */
export function f32ToF16(value: number): number {
  f32[0] = value;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / nan
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow -> inf
  if (e <= 0) {
    if (e < -10) return sign; // underflow -> signed zero
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let m = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    if (rest > half || (rest === half && (m & 1))) m++;
    return sign | m;
  }
  let m = mant >>> 13;
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (m & 1))) {
    m++;
    if (m === 0x400) {
      m = 0;
      e++;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

/** The f32 value of 16 f16 bits. */
export function f16ToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** Converts a whole array to f16 bits. */
export function f32ToF16Bits(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  if (!(values instanceof Float32Array)) {
    for (let i = 0; i < values.length; i++) out[i] = f32ToF16(values[i]);
    return out;
  }
  // f16 normals on their bits (as roundToF16InPlace), the rest through f32ToF16
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < bits.length; i++) {
    const r = roundedToF16Normal(bits[i]);
    out[i] = r >= 0
      ? ((r >>> 16) & 0x8000) | ((((r >>> 23) & 0xff) - 112) << 10) | ((r >>> 13) & 0x3ff)
      : f32ToF16(values[i]);
  }
  return out;
}

/** Converts f16 bits back to f32. */
export function f16BitsToF32(bits: ArrayLike<number>): Float32Array {
  const out = new Float32Array(bits.length);
  if (bits.length < 4096) {
    for (let i = 0; i < bits.length; i++) out[i] = f16ToF32(bits[i]);
    return out;
  }
  // large arrays (checkpoints, read-backs of KV blocks) through a table of all 65536 values
  f16Table ??= Float32Array.from({ length: 65536 }, (_, i) => f16ToF32(i));
  for (let i = 0; i < bits.length; i++) out[i] = f16Table[bits[i] & 0xffff];
  return out;
}

let f16Table: Float32Array | null = null;

/**
 * The f32 bits `u` rounded to the nearest f16 normal (ties to even, 13 mantissa bits dropped),
 * still as f32 bits; -1 where the value or its rounding is not an f16 normal (zeros,
 * subnormals, overflow, inf, NaN), which the callers convert the slow way.
 */
function roundedToF16Normal(u: number): number {
  const exp = (u >>> 23) & 0xff;
  // f16 normals have f32 exponents 113..142; rounding up may carry into 143 (past f16)
  if (exp < 113 || exp > 142) return -1;
  const r = ((u + 0xfff + ((u >>> 13) & 1)) & 0xffffe000) >>> 0;
  return ((r >>> 23) & 0xff) <= 142 ? r : -1;
}

/**
 * Rounds every value to the nearest f16 in place (what the GPU will see after upload). Values
 * in f16's normal range are rounded on their bits (to nearest, ties to even, 13 mantissa bits
 * dropped); the rest (zeros, subnormals, overflow, inf, NaN) through f32ToF16 and back.
 */
export function roundToF16InPlace(values: Float32Array): Float32Array {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < bits.length; i++) {
    const r = roundedToF16Normal(bits[i]);
    if (r >= 0) bits[i] = r;
    else values[i] = f16ToF32(f32ToF16(values[i]));
  }
  return values;
}

/** The f32 value of 16 bfloat16 bits (the top half of an f32). */
export function bf16ToF32(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0];
}

/** Converts bf16 bits to f32. */
export function bf16BitsToF32(bits: ArrayLike<number>): Float32Array {
  const out = new Float32Array(bits.length);
  const view = new Uint32Array(out.buffer);
  for (let i = 0; i < bits.length; i++) view[i] = (bits[i] & 0xffff) << 16;
  return out;
}

/** Rounds one f32 to bfloat16 (ties to even) and returns its 16 bits. */
export function f32ToBf16(value: number): number {
  f32[0] = value;
  const x = u32[0];
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff)) return (x >>> 16) | 0x40;
  const rounded = x + 0x7fff + ((x >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

/** Largest finite f16 value. */
export const F16_MAX = 65504;

/** Clamps values to f16's finite range, in place (as the f16 copies of cast_f16 and
 * moe_gather_f16 do before rounding). */
export function clampF16(values: Float32Array): Float32Array {
  for (let i = 0; i < values.length; i++) {
    values[i] = Math.min(F16_MAX, Math.max(-F16_MAX, values[i]));
  }
  return values;
}
