/**
 * Expert weights in tiles: the host's permutation (tileExpertMatrices, tiledIndex) puts every
 * element at one place inside its own band, and the shader library (lib/expert_tiles.wgsl)
 * finds each element where the host put it, run on this machine's adapter.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import {
  expertTilesFit,
  tiledIndex,
  tiledVariant,
  tileExpertMatrices,
} from "../../kernels/expert_tiles.ts";
import { assembleWgsl, compileWgsl, SHADER_DIR } from "../../src/gpu/wgsl.ts";
import { createStorage, readBuffer } from "../../src/gpu/buffers.ts";
import { sharedGpu } from "../shared_gpu.ts";

test("tiles place every element once, inside its own band of 16 rows", () => {
  const rows = 48, cols = 192, n = 2;
  const data = Float32Array.from({ length: n * rows * cols }, (_, i) => i);
  const tiled = tileExpertMatrices(data, rows, cols);
  assert.equal([...tiled].sort((a, b) => a - b), [...data]);
  for (let m = 0; m < n; m++) {
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        const at = m * rows * cols + tiledIndex(r, c, cols);
        assert.is(tiled[at], data[m * rows * cols + r * cols + c]);
        assert.is(Math.floor(tiledIndex(r, c, cols) / (16 * cols)), Math.floor(r / 16));
      }
    }
  }
  // a tile's row is 64 consecutive columns; the next column tile 2 KB (1024 values) on
  assert.is(tiledIndex(0, 63, cols) - tiledIndex(0, 0, cols), 63);
  assert.is(tiledIndex(0, 64, cols) - tiledIndex(0, 0, cols), 1024);
  assert.is(tiledIndex(1, 0, cols) - tiledIndex(0, 0, cols), 64);
  assert.is(tiledIndex(16, 0, cols), 16 * cols);
});

test("shapes that are not whole tiles are refused", () => {
  assert.ok(expertTilesFit(1536, 2048));
  assert.not.ok(expertTilesFit(64, 32));
  assert.not.ok(expertTilesFit(24, 64));
  assert.throws(() => tileExpertMatrices(new Float32Array(64 * 32), 64, 32), /64 x 32 matrices/);
  assert.throws(() => tileExpertMatrices(new Float32Array(100), 16, 64), /not whole/);
  const v = tiledVariant({ name: "f16-tcs", dtype: "f16" });
  assert.equal([v.name, v.expertTiles], ["f16-tcs-t16", true]);
});

test("the shader library finds each element where the host put it", async () => {
  const gpu = await sharedGpu();
  const rows = 32, cols = 128;
  const lib = readFileSync(SHADER_DIR + "lib/expert_tiles.wgsl", "utf8");
  const results: Uint32Array[] = [];
  for (const tiles of [false, true]) {
    const code = `const EXPERT_TILES: bool = ${tiles};
${lib}
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= ${rows * cols}u) { return; }
  let row = i / ${cols}u;
  let col = i % ${cols}u;
  out[4u * i] = tile_row(row, ${cols}u) + tile_col(col);
  // the 16-byte word of (row, col) (tile_word, through tile_unit of 2 vec4s), the row stride
  // of a 16 x 16 block, and the quad of (row, col) (tile_quad, through tile_unit of 1 vec4)
  out[4u * i + 1u] = tile_row(row, ${cols}u) / 8u + tile_unit(col / 8u, 2u);
  out[4u * i + 2u] = tile_stride(${cols}u);
  out[4u * i + 3u] = tile_row(row, ${cols}u) / 4u + tile_unit(col / 4u, 1u);
}`;
    const module = await compileWgsl(gpu.device, assembleWgsl([{ file: "t", text: code }]), "t");
    const pipeline = gpu.device.createComputePipeline({
      layout: "auto",
      compute: { module, entryPoint: "main" },
    });
    const out = createStorage(gpu.device, "expert tiles test", rows * cols * 16);
    const bind = gpu.device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [{ binding: 0, resource: { buffer: out } }],
    });
    const enc = gpu.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups((rows * cols) / 64);
    pass.end();
    gpu.device.queue.submit([enc.finish()]);
    results.push(new Uint32Array(await readBuffer(gpu.device, out, rows * cols * 16)));
    out.destroy();
  }
  const [plain, tiled] = results;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const i = r * cols + c;
      assert.is(plain[4 * i], i);
      assert.is(plain[4 * i + 1], Math.floor(i / 8));
      assert.is(plain[4 * i + 3], Math.floor(i / 4));
      assert.is(tiled[4 * i + 3], Math.floor(tiledIndex(r, c, cols) / 4), `quad at ${r}, ${c}`);
      assert.is(tiled[4 * i], tiledIndex(r, c, cols), `tile_row + tile_col at ${r}, ${c}`);
      assert.is(tiled[4 * i + 1], Math.floor(tiledIndex(r, c, cols) / 8), `word at ${r}, ${c}`);
    }
  }
  assert.equal([plain[2], tiled[2]], [cols, 64]);
});

test.run();
