/**
 * Deterministic seeded pseudo-random numbers (xoshiro128**, seeded by a string or number
 * through sha256), for fixtures, kernel cases and benchmark prompts.
 *
 * ```ts
 * const rng = Rng.fromSeed("content-v1:0:dp0:salt");
 * rng.int(1, 151936); // uniform integer in [1, 151936)
 * ```
 */
import { createHash } from "node:crypto";

export class Rng {
  private s: Uint32Array;

  private constructor(state: Uint32Array) {
    this.s = state;
    if (!(state[0] | state[1] | state[2] | state[3])) this.s[0] = 1;
  }

  /** A generator whose state is the first 16 bytes of sha256(seed). */
  static fromSeed(seed: string | number): Rng {
    const digest = createHash("sha256").update(String(seed)).digest();
    const state = new Uint32Array(4);
    for (let i = 0; i < 4; i++) state[i] = digest.readUInt32LE(i * 4);
    return new Rng(state);
  }

  /** Next uniform 32-bit unsigned integer. */
  nextU32(): number {
    const s = this.s;
    const result = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
    const t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return result;
  }

  /** Uniform float in [0, 1). */
  float(): number {
    return this.nextU32() / 4294967296;
  }

  /** Uniform integer in [lo, hi), without modulo bias. */
  int(lo: number, hi: number): number {
    const span = hi - lo;
    if (!(span > 0) || span > 4294967296) throw new RangeError(`Rng.int: bad range [${lo}, ${hi})`);
    const limit = 4294967296 - (4294967296 % span);
    let x = this.nextU32();
    while (x >= limit) x = this.nextU32();
    return lo + (x % span);
  }

  /** Standard normal sample (Box-Muller). */
  normal(): number {
    let u = this.float();
    while (u === 0) u = this.float();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.float());
  }

  /** Fills an array with N(0, scale^2) samples. */
  fillNormal(out: Float32Array, scale = 1): Float32Array {
    for (let i = 0; i < out.length; i++) out[i] = this.normal() * scale;
    return out;
  }

  /** Fills an array with uniform samples in [lo, hi). */
  fillUniform(out: Float32Array, lo = -1, hi = 1): Float32Array {
    for (let i = 0; i < out.length; i++) out[i] = lo + (hi - lo) * this.float();
    return out;
  }

  /** In-place Fisher-Yates shuffle. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(0, i + 1);
      [items[i], items[j]] = [items[j], items[i]];
    }
    return items;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
