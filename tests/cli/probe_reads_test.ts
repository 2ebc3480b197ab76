/**
 * probe-reads as a user runs it (one expert, one timed dispatch: lavapipe reads slowly), its
 * coverage check (every word of the matrix read once, else a pattern's addresses are wrong:
 * one with a wrong address fails it), and its config labels.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import process from "node:process";
import { sharedGpu } from "../shared_gpu.ts";
import { runTask } from "./cli_run.ts";
import { createStorage, readBuffer, uploadBuffer } from "../../src/gpu/buffers.ts";
import {
  compilePretouch,
  compileReadPattern,
  configLabel,
  parseConfig,
  QWEN3_MOE_MATRICES,
  READ_PATTERNS,
  type ReadPattern,
  readPatternXor,
} from "../../src/perf/read_patterns.ts";

test("probe-reads times each pattern and finds every word read once", () => {
  const out = join(tmpdir(), `probe-reads-${process.pid}.json`);
  const r = runTask("probe_reads", [
    "--experts",
    "1",
    "--reps",
    "1",
    "--patterns",
    "gu.tiles,dn.rows",
    "--configs",
    "wg8k.w16,wg0k.t2,wg4k.sh,sw,wg4k.sh.r2,w16.r2.nb,wg8k.r2.a3",
    "--json",
    out,
  ]);
  assert.is(r.code, 0, r.stderr);
  const rows = JSON.parse(readFileSync(out, "utf8")).rows;
  assert.equal(
    rows.map((x: { pattern: string; config: string; covered: string }) => [
      x.pattern,
      x.config,
      x.covered,
    ]),
    [
      ["gu.tiles", "wg8k.w16", "yes"],
      ["gu.tiles", "wg0k.w8.t2", "-"],
      ["gu.tiles", "wg4k.w8.sh", "yes"],
      ["gu.tiles", "wg0k.w8.sw", "yes"],
      ["gu.tiles", "wg4k.w8.sh.r2", "yes"],
      ["gu.tiles", "wg0k.w16.r2.nb", "yes"],
      ["gu.tiles", "wg8k.w8.r2.a3", "yes"],
      ["dn.rows", "wg8k.w16", "yes"],
      ["dn.rows", "wg0k.w8.t2", "-"],
      ["dn.rows", "wg4k.w8.sh", "yes"],
      ["dn.rows", "wg0k.w8.sw", "yes"],
      ["dn.rows", "wg4k.w8.sh.r2", "yes"],
      ["dn.rows", "wg0k.w16.r2.nb", "yes"],
      ["dn.rows", "wg8k.w8.r2.a3", "yes"],
    ],
  );
  for (const x of rows) assert.ok(x.us > 0, JSON.stringify(x));
  assert.match(r.stdout, /gu\.tiles: gate\/up stored in 2 KB tiles/);
});

test("probe-reads reads copies of the weights in turn, each after a timed pretouch", () => {
  const out = join(tmpdir(), `probe-reads-layers-${process.pid}.json`);
  // three copies of one expert's down weights, read once each, with `flags`
  const layers = (...flags: string[]) => {
    const r = runTask("probe_reads", [
      ...["--experts", "1", "--reps", "1", "--layers", "3", ...flags],
      ...["--patterns", "dn.tiles", "--configs", "wg8k", "--json", out],
    ]);
    assert.is(r.code, 0, r.stderr);
    return { stdout: r.stdout, row: JSON.parse(readFileSync(out, "utf8")).rows[0] };
  };
  const { stdout, row } = layers("--pretouch", "4");
  // the copies made on the GPU hold the same words: the last one read covers the matrix
  assert.is(row.covered, "yes");
  assert.is(row.layers, 3);
  assert.is(row.pretouch_kb, 4);
  assert.ok(row.pretouch_us > 0 && row.us > 0, JSON.stringify(row));
  assert.match(stdout, /\(4 KB\)/);
  // in an arena: the check reads the last copy's lanes, so a copy bound where none was written
  // (zeros) fails it; copies bound at one offset would pass (they hold the same words)
  const arena = layers("--placement", "arena");
  assert.is(arena.row.covered, "yes");
  assert.is(arena.row.placement, "arena");
  assert.is(arena.row.buffers, 1);
  assert.match(arena.stdout, /3 \(1 arena\)/);
  const tooMany = runTask("probe_reads", ["--reps", "100", "--layers", "48"]);
  assert.is(tooMany.code, 2);
  assert.match(tooMany.stderr, /--reps 100 x --layers 48: at most 2047 timed dispatches/);
});

test("a pretouch loads one word a stride and writes only where one is zero", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  const words = new Uint32Array(4096).fill(7);
  words[1024 * 3] = 0; // the fourth load's word (stride 4 KB = 1024 words)
  words[5] = 0; // between loads: never read
  const w = uploadBuffer(d, "pretouch test w", words);
  const out = uploadBuffer(d, "pretouch test out", new Uint32Array([99, 0, 0, 0]));
  const t = await compilePretouch(gpu, words.byteLength, 4096);
  assert.is(t.loads, 4);
  const enc = d.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.setPipeline(t.pipeline);
  pass.setBindGroup(
    0,
    d.createBindGroup({
      layout: t.pipeline.getBindGroupLayout(0),
      entries: [{ binding: 0, resource: { buffer: w } }, { binding: 1, resource: { buffer: out } }],
    }),
  );
  pass.dispatchWorkgroups(t.grid[0], t.grid[1]);
  pass.end();
  d.queue.submit([enc.finish()]);
  assert.is(new Uint32Array(await readBuffer(d, out, 16))[0], 3);
  w.destroy();
  out.destroy();
  const bad = await compilePretouch(gpu, 64, 6).then(() => "", (e: Error) => e.message);
  assert.match(bad, /stride 6 bytes must be a positive multiple of 4/);
});

test("a pattern that reads a word twice and another never fails the coverage check", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  const rows = READ_PATTERNS.find((p) => p.name === "dn.rows")!;
  // lane 1's words read lane 0's instead
  const wrong: ReadPattern = {
    ...rows,
    name: "dn.wrong",
    addr: (m) => rows.addr(m).replace("lid % 8u", "select(lid % 8u, 0u, lid % 8u == 1u)"),
  };
  const m = { experts: 1, ...QWEN3_MOE_MATRICES.dn };
  const words = new Uint32Array(m.rows * m.words * 4).map((_, i) => (i * 2654435761) >>> 0);
  const w = uploadBuffer(d, "probe-reads test w", words);
  const expected = readPatternXor(words);
  const results: boolean[] = [];
  for (const p of [rows, wrong]) {
    const rp = await compileReadPattern(gpu, p, m, parseConfig("wg4k"));
    const out = createStorage(d, "probe-reads test out", rp.lanes * 4);
    const bind = d.createBindGroup({
      layout: rp.pipeline.getBindGroupLayout(0),
      entries: [{ binding: 0, resource: { buffer: w } }, { binding: 1, resource: { buffer: out } }],
    });
    const enc = d.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(rp.pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(rp.grid[0], rp.grid[1]);
    pass.end();
    d.queue.submit([enc.finish()]);
    const lanes = new Uint32Array(await readBuffer(d, out, rp.lanes * 4));
    results.push(readPatternXor(lanes) === expected);
    out.destroy();
  }
  w.destroy();
  assert.equal(results, [true, false]);
});

test("configs parse from their labels and bad ones are refused by name", () => {
  assert.equal(parseConfig("wg8k.w16.t3"), { workgroupBytes: 8192, words: 16, touch: 3 });
  assert.is(configLabel(parseConfig("")), "wg0k.w8");
  assert.equal(parseConfig("w16.sh"), { workgroupBytes: 0, words: 16, touch: 0, stage: "sh" });
  assert.is(configLabel(parseConfig("sw.wg4k")), "wg4k.w8.sw");
  assert.equal(parseConfig("wg8k.r2.nb"), {
    workgroupBytes: 8192,
    words: 8,
    touch: 0,
    sets2: true,
    noBarrier: true,
  });
  assert.is(configLabel(parseConfig("nb.sh.r2")), "wg0k.w8.sh.r2.nb");
  assert.equal(parseConfig("a1056.r2"), {
    workgroupBytes: 0,
    words: 8,
    touch: 0,
    sets2: true,
    ahead: 1056,
  });
  assert.is(configLabel(parseConfig("a64.wg8k")), "wg8k.w8.a64");
  assert.throws(
    () => parseConfig("wg8k.w12"),
    /'w12' is not wgNk, w8, w16, tN, sh, sw, r2, nb or aN/,
  );
  assert.throws(() => parseConfig("r2.t3"), /r2 takes no touch loads/);
  assert.throws(() => parseConfig("wg64k"), /at most 40 KB/);
  const r = runTask("probe_reads", ["--patterns", "gu.nope"]);
  assert.is(r.code, 2);
  assert.match(r.stderr, /no pattern 'gu\.nope'/);
});

test.run();
