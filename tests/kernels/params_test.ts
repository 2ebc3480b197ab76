import { test } from "uvu";
import * as assert from "uvu/assert";
import { defineParams } from "../../kernels/params.ts";

test("a params struct is padded to 16 bytes and packs fields in declaration order", () => {
  const layout = defineParams({ rows: "u32", eps: "f32", delta: "i32" });
  assert.is(layout.size, 16);
  assert.ok(layout.wgsl.includes("rows: u32,\n  eps: f32,\n  delta: i32,\n  _pad0: u32,"));
  const bytes = layout.pack({ rows: 7, eps: 0.5, delta: -3 });
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  assert.is(view.getUint32(0, true), 7);
  assert.is(view.getFloat32(4, true), 0.5);
  assert.is(view.getInt32(8, true), -3);
});

test("packing rejects a negative u32 and a missing field", () => {
  const layout = defineParams({ n: "u32" });
  assert.throws(() => layout.pack({ n: -1 }), /out of range/);
  assert.throws(() => layout.pack({} as { n: number }), /'n' is undefined/);
});

test.run();
