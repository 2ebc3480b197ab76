import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SafetensorsFile } from "../../src/model/safetensors_file.ts";
import {
  MAX_SAFETENSORS_HEADER_BYTES,
  parseSafetensorsHeader,
} from "../../src/model/safetensors_header.ts";
import {
  encodeSafetensorsHeader,
  SafetensorsWriter,
  writeSafetensors,
} from "../../src/model/safetensors_writer.ts";

const dir = mkdtempSync(join(tmpdir(), "webfpm-safetensors-"));

function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** A file from a hand-written header object and data bytes (for corrupt cases). */
function rawFile(name: string, header: unknown, data: Uint8Array, lengthField?: bigint): string {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, lengthField ?? BigInt(json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  const path = join(dir, name);
  writeFileSync(path, out);
  return path;
}

function throwsWith(fn: () => unknown, ...parts: string[]) {
  try {
    fn();
  } catch (err) {
    const msg = (err as Error).message;
    for (const p of parts) assert.ok(msg.includes(p), `"${msg}" should mention "${p}"`);
    return;
  }
  assert.unreachable("expected an error mentioning " + parts.join(", "));
}

test("a written file reads back every tensor, dtype, shape and the metadata", () => {
  const path = join(dir, "roundtrip.safetensors");
  const a = new Float32Array([1.5, -2, 3, 4, 5, 6]);
  const b = new Uint16Array([0x3c00, 0xc000]);
  const c = new BigInt64Array([1n, -2n, 3n]);
  writeSafetensors(path, [
    { name: "a", dtype: "F32", shape: [2, 3], data: bytesOf(a) },
    { name: "b", dtype: "BF16", shape: [2], data: bytesOf(b) },
    { name: "empty", dtype: "F16", shape: [0, 4], data: new Uint8Array(0) },
    { name: "c", dtype: "I64", shape: [3], data: bytesOf(c) },
  ], { format: "pt" });
  const f = SafetensorsFile.open(path);
  assert.equal(f.names(), ["a", "b", "empty", "c"]);
  assert.equal(f.header.metadata, { format: "pt" });
  assert.equal(f.info("a").shape, [2, 3]);
  assert.is(f.info("b").dtype, "BF16");
  assert.equal([...new Float32Array(f.read("a").buffer)], [...a]);
  assert.equal([...new Uint16Array(f.read("b").buffer)], [...b]);
  assert.is(f.read("empty").length, 0);
  assert.equal([...new BigInt64Array(f.read("c").buffer)], [...c]);
  f.close();
  throwsWith(() => f.read("a"), path, "read after close");
});

test("the header is padded to 8 bytes and the output is byte-identical for the same input", () => {
  const specs = [{ name: "x", dtype: "F32" as const, shape: [3] }];
  const header = encodeSafetensorsHeader(specs, { k: "v" });
  assert.is((header.length - 8) % 8, 0);
  const data = bytesOf(new Float32Array([1, 2, 3]));
  writeSafetensors(join(dir, "d1.safetensors"), specs.map((s) => ({ ...s, data })), { k: "v" });
  writeSafetensors(join(dir, "d2.safetensors"), specs.map((s) => ({ ...s, data })), { k: "v" });
  const one = readFileSync(join(dir, "d1.safetensors"));
  assert.ok(one.equals(readFileSync(join(dir, "d2.safetensors"))));
  assert.equal([...one.subarray(0, header.length)], [...header]);
});

test("the streaming writer accepts a tensor in chunks and refuses bytes past it", () => {
  const path = join(dir, "chunks.safetensors");
  const w = SafetensorsWriter.create(path, [
    { name: "big", dtype: "U8", shape: [10] },
    { name: "next", dtype: "U8", shape: [2] },
  ]);
  w.write(new Uint8Array([0, 1, 2, 3]));
  assert.is(w.current, "big");
  w.write(new Uint8Array([4, 5, 6, 7, 8, 9]));
  assert.is(w.current, "next");
  throwsWith(() => w.write(new Uint8Array(3)), "next", "only 2 remain");
  w.write(new Uint8Array([10, 11]));
  assert.is(w.current, null);
  w.close();
  const f = SafetensorsFile.open(path);
  assert.equal([...f.read("big")], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  assert.equal([...f.read("next")], [10, 11]);
  f.close();
});

test("closing before every tensor is written fails and leaves no file", () => {
  const path = join(dir, "incomplete.safetensors");
  const w = SafetensorsWriter.create(path, [{ name: "t", dtype: "F32", shape: [4] }]);
  w.write(new Uint8Array(8));
  throwsWith(() => w.close(), "t", "complete");
  throwsWith(() => SafetensorsFile.open(path), "ENOENT");
});

test("writeTensor refuses a tensor out of order or of the wrong size", () => {
  const w = SafetensorsWriter.create(join(dir, "order.safetensors"), [
    { name: "first", dtype: "F32", shape: [2] },
    { name: "second", dtype: "F32", shape: [2] },
  ]);
  throwsWith(() => w.writeTensor("second", new Uint8Array(8)), "second", "out of order");
  throwsWith(() => w.writeTensor("first", new Uint8Array(4)), "first", "needs 8 bytes, got 4");
  w.abort();
});

test("rows, byte ranges and chunks read only the asked part of a tensor", () => {
  const path = join(dir, "rows.safetensors");
  const m = new Float32Array(5 * 3).map((_, i) => i);
  writeSafetensors(path, [{ name: "m", dtype: "F32", shape: [5, 3], data: bytesOf(m) }]);
  const f = SafetensorsFile.open(path);
  assert.equal([...new Float32Array(f.readRows("m", 1, 2).buffer)], [3, 4, 5, 6, 7, 8]);
  const dest = new Uint8Array(8);
  f.readInto("m", dest, 4 * 13);
  assert.equal([...new Float32Array(dest.buffer)], [13, 14]);
  const pieces = [...f.chunks("m", 24)];
  assert.equal(pieces.map((p) => [p.offset, p.bytes.length]), [[0, 24], [24, 24], [48, 12]]);
  throwsWith(() => f.readRows("m", 4, 2), path, '"m"', "rows [4, 6)");
  throwsWith(() => f.readInto("m", new Uint8Array(8), 56), path, '"m"', "outside");
  throwsWith(() => f.info("nope"), path, '"nope"');
  f.close();
});

test("overlapping data spans are rejected, naming both tensors", () => {
  const path = rawFile("overlap.safetensors", {
    a: { dtype: "F32", shape: [2], data_offsets: [0, 8] },
    b: { dtype: "F32", shape: [2], data_offsets: [4, 12] },
  }, new Uint8Array(12));
  throwsWith(() => SafetensorsFile.open(path), path, '"b"', '"a"', "overlaps");
});

test("a span nested inside an earlier long span is an overlap too", () => {
  const path = rawFile("nested.safetensors", {
    long: { dtype: "U8", shape: [100], data_offsets: [0, 100] },
    empty: { dtype: "U8", shape: [0], data_offsets: [10, 10] },
    inner: { dtype: "U8", shape: [10], data_offsets: [30, 40] },
  }, new Uint8Array(100));
  throwsWith(() => SafetensorsFile.open(path), path, '"inner"', '"long"', "overlaps");
});

test("a span outside the file is rejected", () => {
  const path = rawFile("outside.safetensors", {
    a: { dtype: "F32", shape: [4], data_offsets: [0, 16] },
  }, new Uint8Array(12));
  throwsWith(() => SafetensorsFile.open(path), path, '"a"', "outside the file");
});

test("an unknown dtype is rejected", () => {
  const path = rawFile("dtype.safetensors", {
    a: { dtype: "Q4_K", shape: [4], data_offsets: [0, 4] },
  }, new Uint8Array(4));
  throwsWith(() => SafetensorsFile.open(path), path, '"a"', "unknown dtype", "Q4_K");
});

test("shape x dtype size must equal the byte span", () => {
  const path = rawFile("span.safetensors", {
    a: { dtype: "BF16", shape: [3], data_offsets: [0, 8] },
  }, new Uint8Array(8));
  throwsWith(() => SafetensorsFile.open(path), path, '"a"', "6 bytes", "span 8");
});

test("a header length above the bound is rejected before anything is allocated", () => {
  const path = rawFile("huge.safetensors", {}, new Uint8Array(0), 1n << 40n);
  throwsWith(
    () => SafetensorsFile.open(path),
    path,
    "exceeds",
    String(MAX_SAFETENSORS_HEADER_BYTES),
  );
});

test("a header length past the end of the file is rejected", () => {
  const path = rawFile("short.safetensors", {}, new Uint8Array(0), 4096n);
  throwsWith(() => SafetensorsFile.open(path), path, "past the end");
});

test("a header that is not a JSON object or has a bad __metadata__ is rejected", () => {
  const notJson = join(dir, "notjson.safetensors");
  const body = new TextEncoder().encode("{not json}");
  const buf = new Uint8Array(8 + body.length);
  new DataView(buf.buffer).setBigUint64(0, BigInt(body.length), true);
  buf.set(body, 8);
  writeFileSync(notJson, buf);
  throwsWith(() => SafetensorsFile.open(notJson), notJson, "not valid UTF-8 JSON");
  const arr = rawFile("array.safetensors", [1, 2], new Uint8Array(0));
  throwsWith(() => SafetensorsFile.open(arr), arr, "not a JSON object");
  const meta = rawFile("meta.safetensors", { __metadata__: { n: 1 } }, new Uint8Array(0));
  throwsWith(() => SafetensorsFile.open(meta), meta, "__metadata__", '"n"');
});

test("a file shorter than the length prefix is not a safetensors file", () => {
  const path = join(dir, "tiny.safetensors");
  writeFileSync(path, new Uint8Array(3));
  throwsWith(() => SafetensorsFile.open(path), path, "not a safetensors file");
});

test('a header with "__metadata__": null is read, as the reference reader reads it', () => {
  // safetensors' own reader (serde Option<HashMap>) takes null as no metadata
  const json = new TextEncoder().encode(JSON.stringify({
    __metadata__: null,
    a: { dtype: "F32", shape: [1], data_offsets: [0, 4] },
  }));
  const header = parseSafetensorsHeader(json, 8 + json.length + 4, "model.safetensors");
  assert.equal([...header.tensors.keys()], ["a"]);
  assert.equal(header.metadata, {});
});

test.run();
