/**
 * The bit-level fast paths of f32 -> f16 rounding (roundToF16InPlace, f32ToF16Bits) give
 * exactly what the element-wise conversion gives, for every class of f32 (normals near f16's
 * edges, subnormals, overflow, inf, NaN, signed zeros).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  f16BitsToF32,
  f16ToF32,
  f32ToF16,
  f32ToF16Bits,
  roundToF16InPlace,
} from "../../src/util/f16.ts";
import { Rng } from "../../src/util/rng.ts";

function samples(): Float32Array {
  const n = 200_000;
  const a = new Float32Array(n + 12);
  const bits = new Uint32Array(a.buffer);
  const rng = Rng.fromSeed("f16 rounding");
  for (let i = 0; i < n; i++) bits[i] = rng.nextU32(); // every exponent, both signs, NaNs
  a.set([
    65504,
    65519.99,
    65520,
    6.1e-5,
    6.103515625e-5,
    1.00048828125,
    1.00146484375,
    0,
    -0,
    1e-8,
    Infinity,
    -Infinity,
  ], n);
  return a;
}

test("roundToF16InPlace equals f16ToF32(f32ToF16(x)) bit for bit", () => {
  const a = samples();
  const want = a.map((x) => f16ToF32(f32ToF16(x)));
  roundToF16InPlace(a);
  let bad = 0;
  for (let i = 0; i < a.length; i++) {
    if (!Object.is(a[i], want[i]) && !(Number.isNaN(a[i]) && Number.isNaN(want[i]))) bad++;
  }
  assert.is(bad, 0);
});

test("f32ToF16Bits equals f32ToF16 element-wise", () => {
  const a = samples();
  const got = f32ToF16Bits(a);
  let bad = 0;
  for (let i = 0; i < a.length; i++) if (got[i] !== f32ToF16(a[i])) bad++;
  assert.is(bad, 0);
  assert.equal(
    Array.from(f32ToF16Bits([1, -2, 0.5])),
    [0x3c00, 0xc000, 0x3800],
    "plain arrays too",
  );
});

test("f16BitsToF32 through its table equals f16ToF32 on every pattern", () => {
  const all = f16BitsToF32(Uint16Array.from({ length: 65536 }, (_, i) => i));
  let bad = 0;
  for (let i = 0; i < 65536; i++) {
    if (!Object.is(all[i], Math.fround(f16ToF32(i))) && !(isNaN(all[i]) && isNaN(f16ToF32(i)))) {
      bad++;
    }
  }
  assert.is(bad, 0);
});

test.run();
