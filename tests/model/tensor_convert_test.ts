import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  f32ToTensorBytes,
  mergeF16Overflow,
  tensorToF16Bits,
  tensorToF32,
} from "../../src/model/tensor_convert.ts";

function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

test("bf16, f16 and f32 bytes convert to the same f32 values when exactly representable", () => {
  const values = new Float32Array([0, 1, -2.5, 0.125, 3072, -0.375]);
  for (const dtype of ["F32", "F16", "BF16"] as const) {
    const back = tensorToF32(f32ToTensorBytes(values, dtype), dtype);
    assert.equal([...back], [...values], dtype);
  }
});

test("bf16 bits are the top half of the f32 bits (1.0 = 0x3f80, -2 = 0xc000)", () => {
  const bits = new Uint16Array(
    bytesOf(f32ToTensorBytes(new Float32Array([1, -2]), "BF16")).slice().buffer,
  );
  assert.equal([...bits], [0x3f80, 0xc000]);
  assert.equal([...tensorToF32(bytesOf(new Uint16Array([0x4049])), "BF16")], [3.140625]);
});

test("converting to f16 rounds to nearest even and reports no overflow for small values", () => {
  const { bits, overflow } = tensorToF16Bits(
    f32ToTensorBytes(new Float32Array([1, 1 + 2 ** -11, -0.5]), "F32"),
    "F32",
  );
  assert.equal([...bits], [0x3c00, 0x3c00, 0xb800]);
  assert.equal(overflow, { count: 0, maxAbs: 1 + 2 ** -11 });
});

test("values that overflow f16 are counted with the largest magnitude seen", () => {
  const big = new Float32Array([70000, -1e6, 65504, 65519, 1]);
  const { bits, overflow } = tensorToF16Bits(f32ToTensorBytes(big, "BF16"), "BF16");
  // bf16 rounds 70000 -> 70144 and 65519 -> 65536 (which overflows f16); 65504 -> 65536 too.
  assert.is(overflow.count, 4);
  assert.is(overflow.maxAbs, 999424);
  assert.is(bits[0], 0x7c00);
  assert.is(bits[1], 0xfc00);
  assert.is(bits[4], 0x3c00);
  const exact = tensorToF16Bits(bytesOf(new Float32Array([65504, 65519.99, 65520])), "F32");
  assert.equal(exact.overflow, { count: 1, maxAbs: 65520 });
  assert.equal(mergeF16Overflow({ count: 2, maxAbs: 1e5 }, exact.overflow), {
    count: 3,
    maxAbs: 1e5,
  });
});

test("f16 input passes through with its max magnitude and never overflows", () => {
  const bits = new Uint16Array([0x7bff, 0x3c00, 0x7c00]);
  const out = tensorToF16Bits(bytesOf(bits), "F16");
  assert.equal([...out.bits], [0x7bff, 0x3c00, 0x7c00]);
  assert.equal(out.overflow, { count: 0, maxAbs: 65504 });
});

test("non-float dtypes and ragged byte lengths are refused", () => {
  assert.throws(() => tensorToF32(new Uint8Array(4), "I32"), /I32/);
  assert.throws(() => tensorToF32(new Uint8Array(3), "F16"), /not a multiple of 2/);
});

test.run();
