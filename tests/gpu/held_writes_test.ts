import { test } from "uvu";
import * as assert from "uvu/assert";
import { readBuffer, uploadBuffer, writeBuffer } from "../../src/gpu/buffers.ts";
import { holdWrites, makeWrites } from "../../src/gpu/held_writes.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("held writes land only when made, in order, with the bytes they had when held", async () => {
  const { device } = await sharedGpu();
  const buffer = uploadBuffer(device, "held", new Uint32Array([1, 2, 3, 4]));
  try {
    const data = new Uint32Array([5, 6]);
    const [result, writes] = holdWrites(device, () => {
      writeBuffer(device, buffer, 0, data);
      writeBuffer(device, buffer, 4, new Uint32Array([7])); // over the 6 written first
      writeBuffer(device, buffer, 12, new Uint8Array([9, 0])); // padded to 4 bytes
      return "encoded";
    });
    assert.is(result, "encoded");
    assert.is(writes.length, 3);
    data.fill(0); // the caller reuses its array
    const before = new Uint32Array(await readBuffer(device, buffer, 16));
    assert.equal([...before], [1, 2, 3, 4], "nothing written while held");
    makeWrites(device, writes);
    const after = new Uint32Array(await readBuffer(device, buffer, 16));
    assert.equal([...after], [5, 7, 3, 9]);
    writeBuffer(device, buffer, 0, new Uint32Array([8]));
    assert.is(new Uint32Array(await readBuffer(device, buffer, 4))[0], 8, "no hold: written");
  } finally {
    buffer.destroy();
  }
});

test("a hold cannot open inside another on the same device, and closes when its body throws", async () => {
  const { device } = await sharedGpu();
  assert.throws(
    () => holdWrites(device, () => holdWrites(device, () => 0)),
    /already held/,
  );
  assert.throws(() =>
    holdWrites(device, () => {
      throw new Error("encode failed");
    }), /encode failed/);
  const [, writes] = holdWrites(device, () => 0);
  assert.is(writes.length, 0, "the hold the throw left is closed");
});

test.run();
