import { test } from "uvu";
import * as assert from "uvu/assert";
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { Checkpoint } from "../../src/model/checkpoint.ts";
import { loadModelConfig } from "../../src/model/config.ts";
import {
  checkCheckpointTensors,
  expectedTensors,
  expertTensorNames,
  lmHeadTensorName,
  routerTensorName,
} from "../../src/model/model_tensors.ts";
import { SafetensorsWriter, writeSafetensors } from "../../src/model/safetensors_writer.ts";

const moe = ensureFixture("tiny-qwen3-moe").dir;
const mixtral = ensureFixture("tiny-mixtral").dir;
const dense = ensureFixture("tiny-qwen3").dir;

/**
 * Copies a checkpoint into a fresh directory as one file, streaming each tensor in 64 KiB
 * chunks, leaving out the tensors in `drop`.
 */
function copyWithout(src: string, drop: string[]): string {
  const out = mkdtempSync(join(tmpdir(), "webfpm-ckpt-"));
  copyFileSync(join(src, "config.json"), join(out, "config.json"));
  const ckpt = Checkpoint.open(src);
  const names = ckpt.names().filter((n) => !drop.includes(n));
  const w = SafetensorsWriter.create(
    join(out, "model.safetensors"),
    names.map((name) => ({ name, dtype: ckpt.info(name).dtype, shape: ckpt.info(name).shape })),
  );
  for (const name of names) for (const { bytes } of ckpt.chunks(name, 65536)) w.write(bytes);
  w.close();
  ckpt.close();
  return out;
}

test("every fixture holds exactly the tensors its architecture expects", () => {
  for (const dir of [moe, mixtral, dense]) {
    const config = loadModelConfig(dir);
    const ckpt = Checkpoint.open(dir);
    assert.equal(checkCheckpointTensors(config, ckpt), [], dir);
    assert.equal(ckpt.names(), expectedTensors(config).map((t) => t.name).sort());
    ckpt.close();
  }
});

test("tensor names follow each architecture's Hugging Face layout", () => {
  const q = loadModelConfig(moe), m = loadModelConfig(mixtral), d = loadModelConfig(dense);
  assert.is(routerTensorName(q, 2), "model.layers.2.mlp.gate.weight");
  assert.equal(expertTensorNames(q, 0, 7), {
    gate: "model.layers.0.mlp.experts.7.gate_proj.weight",
    up: "model.layers.0.mlp.experts.7.up_proj.weight",
    down: "model.layers.0.mlp.experts.7.down_proj.weight",
  });
  assert.is(routerTensorName(m, 1), "model.layers.1.block_sparse_moe.gate.weight");
  assert.equal(expertTensorNames(m, 1, 3), {
    gate: "model.layers.1.block_sparse_moe.experts.3.w1.weight",
    up: "model.layers.1.block_sparse_moe.experts.3.w3.weight",
    down: "model.layers.1.block_sparse_moe.experts.3.w2.weight",
  });
  const names = expectedTensors(q).map((t) => t.name);
  assert.ok(names.includes("model.layers.1.mlp.gate_proj.weight"), "layer 1 is dense");
  assert.not.ok(names.includes("model.layers.1.mlp.gate.weight"), "a dense layer has no router");
  assert.ok(names.includes("model.layers.0.self_attn.q_norm.weight"));
  assert.not.ok(
    expectedTensors(m).some((t) => t.name.includes("q_norm")),
    "Mixtral has no q/k norm",
  );
  assert.is(lmHeadTensorName(q), "lm_head.weight");
  assert.is(lmHeadTensorName(m), "model.embed_tokens.weight");
  assert.not.ok(expectedTensors(d).some((t) => t.name === "lm_head.weight"), "tied: no lm_head");
  const qProj = expectedTensors(d).find((t) => t.name === "model.layers.0.self_attn.q_proj.weight");
  assert.equal(qProj?.shape, [64, 32], "q_proj is [heads * head_dim, hidden]");
});

test("a sharded checkpoint maps each tensor to its shard and reads across shards", () => {
  const ckpt = Checkpoint.open(dense);
  assert.ok(ckpt.pathOf("model.embed_tokens.weight").endsWith("model-00001-of-00002.safetensors"));
  assert.ok(ckpt.pathOf("model.norm.weight").endsWith("model-00002-of-00002.safetensors"));
  const norm = ckpt.readF32("model.norm.weight");
  assert.is(norm.length, 32);
  assert.ok(norm.every((v) => v > 0.5 && v < 1.5), "norm weights are near 1");
  const rows = new Float32Array(ckpt.readRows("model.embed_tokens.weight", 151668, 1).buffer);
  const all = ckpt.readF32("model.embed_tokens.weight");
  assert.equal([...rows], [...all.subarray(151668 * 32)]);
  ckpt.close();
});

test("a missing tensor is named by the tensor check", () => {
  const name = "model.layers.1.block_sparse_moe.experts.5.w3.weight";
  const dir = copyWithout(mixtral, [name]);
  const ckpt = Checkpoint.open(dir);
  assert.throws(
    () => checkCheckpointTensors(loadModelConfig(dir), ckpt),
    new RegExp(`missing tensor "${name.replaceAll(".", "\\.")}"`),
  );
  assert.throws(() => ckpt.read(name), /no tensor/);
  ckpt.close();
});

test("a tensor of the wrong shape is named with both shapes", () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-ckpt-"));
  copyFileSync(join(dense, "config.json"), join(dir, "config.json"));
  const config = loadModelConfig(dir);
  writeSafetensors(
    join(dir, "model.safetensors"),
    expectedTensors(config).map((t) => {
      const shape = t.name === "model.norm.weight" ? [31] : t.shape;
      const n = shape.reduce((a, b) => a * b, 1);
      return { name: t.name, dtype: "F32" as const, shape, data: new Uint8Array(n * 4) };
    }),
  );
  const ckpt = Checkpoint.open(dir);
  assert.throws(
    () => checkCheckpointTensors(config, ckpt),
    /"model.norm.weight" has shape \[31\], expected \[32\]/,
  );
  ckpt.close();
});

test("shard index errors name the index, shard and tensor", () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-ckpt-"));
  assert.throws(() => Checkpoint.open(dir), /no model.safetensors or model.safetensors.index.json/);
  const a = new Uint8Array(new Float32Array([1, 2]).buffer);
  writeSafetensors(join(dir, "s1.safetensors"), [{ name: "x", dtype: "F32", shape: [2], data: a }]);
  writeSafetensors(join(dir, "s2.safetensors"), [{ name: "x", dtype: "F32", shape: [2], data: a }]);
  const index = (map: Record<string, string>) =>
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ weight_map: map }));
  index({ x: "s1.safetensors", y: "s3.safetensors" });
  assert.throws(() => Checkpoint.open(dir), /shard s3.safetensors \(tensor "y"\) not found/);
  index({ x: "s1.safetensors", y: "s1.safetensors" });
  assert.throws(
    () => Checkpoint.open(dir),
    /s1.safetensors: tensor "y" listed in model.safetensors.index.json is absent/,
  );
  index({ x: "s1.safetensors", z: "s2.safetensors" });
  assert.throws(() => Checkpoint.open(dir), /s2.safetensors: tensor "z" listed/);
  index({ x: "s1.safetensors", w: "s2.safetensors" });
  writeSafetensors(join(dir, "s2.safetensors"), [
    { name: "w", dtype: "F32", shape: [2], data: a },
    { name: "x", dtype: "F32", shape: [2], data: a },
  ]);
  assert.throws(() => Checkpoint.open(dir), /s2.safetensors: tensor "x" also in .*s1.safetensors/);
  writeFileSync(join(dir, "model.safetensors.index.json"), "{}");
  assert.throws(() => Checkpoint.open(dir), /missing "weight_map"/);
});

test("readF16Bits converts a checkpoint tensor and reports f16 overflow", () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-ckpt-"));
  const values = new Float32Array([1, -2, 1e5, -3e5]);
  writeSafetensors(join(dir, "model.safetensors"), [
    { name: "w", dtype: "F32", shape: [4], data: new Uint8Array(values.buffer) },
  ]);
  const ckpt = Checkpoint.open(dir);
  const { bits, overflow } = ckpt.readF16Bits("w");
  assert.equal([...bits], [0x3c00, 0xc000, 0x7c00, 0xfc00]);
  assert.equal(overflow, { count: 2, maxAbs: 3e5 });
  ckpt.close();
});

test("a non-float tensor is refused by the float readers with its dtype", () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-ckpt-"));
  writeSafetensors(join(dir, "model.safetensors"), [
    { name: "ids", dtype: "I32", shape: [1], data: new Uint8Array(4) },
  ]);
  const ckpt = Checkpoint.open(dir);
  assert.throws(() => ckpt.readF32("ids"), /"ids" has dtype I32/);
  assert.throws(() => ckpt.readF16Bits("ids"), /"ids" has dtype I32/);
  ckpt.close();
});

function errorOf(f: () => unknown): Error {
  try {
    f();
  } catch (err) {
    return err as Error;
  }
  throw new Error("expected an error");
}

test("an index naming a folder for a shard ('', '.', '..') is refused, naming the index", () => {
  for (const shard of ["", ".", ".."]) {
    const dir = mkdtempSync(join(tmpdir(), "webfpm-s47b-"));
    const index = join(dir, "model.safetensors.index.json");
    writeFileSync(index, JSON.stringify({ weight_map: { "model.norm.weight": shard } }));
    const err = errorOf(() => Checkpoint.open(dir));
    assert.not.match(err.message, /^EISDIR/, `shard ${JSON.stringify(shard)}: ${err.message}`);
    assert.ok(
      err.message.includes(index) || err.message.includes(dir),
      `shard ${JSON.stringify(shard)}: ${err.message}`,
    );
  }
});

test("a model.safetensors that is a folder is refused, naming it", () => {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-s47b-"));
  mkdirSync(join(dir, "model.safetensors"));
  const err = errorOf(() => Checkpoint.open(dir));
  assert.match(err.message, /model\.safetensors: not a file$/);
});

test.run();
