/**
 * `deno task probe-reads`: how fast the memory system serves the MoE decode GEMMs' weight
 * loads alone (src/perf/read_patterns.ts), per address pattern and config, in GB/s and as a
 * share of the measured read roof. README ("Writing a tensor-core kernel") quotes its H200
 * figures: the staged GEMMs' loads read 90% of the roof with no workgroup memory and 78% beside
 * the real kernel's 8 KB; 2 KB weight tiles 97% and 85%.
 *
 * Per pattern and config: one untimed dispatch, a check that the lanes' XOR results cover
 * every word of the matrix once (configs without touch loads), then `--reps` timed dispatches
 * in one pass each; the upper median. The weights buffer (one layer: `--experts` experts of
 * the pattern's matrix) is filled on the host with a fixed sequence whose f16 halves are all
 * normal numbers. `sh` against `sw` and no staging tells what writing each 16-byte word as 8 f16
 * stores (all a subgroup matrix can load from) costs against the loads alone.
 *
 * ```sh
 * deno task probe-reads --patterns gu.rows,gu.tiles --configs wg0k,wg8k,wg8k.w16 --json r.json
 * deno task probe-reads --patterns gu.tiles --configs wg8k.r2 --layers 48 --pretouch 64
 * ```
 */
import process from "node:process";
import { describeGpu, openGpu } from "../gpu/device.ts";
import { createStorage, readBuffer, uploadBuffer } from "../gpu/buffers.ts";
import {
  allocateRanges,
  type BufferRange,
  type Placement,
  PLACEMENTS,
} from "../gpu/buffer_ranges.ts";
import { MAX_TIMED_PASSES, PassTimer } from "../gpu/timestamps.ts";
import {
  compilePretouch,
  compileReadPattern,
  configLabel,
  parseConfig,
  QWEN3_MOE_MATRICES,
  READ_PATTERNS,
  readPatternXor,
} from "../perf/read_patterns.ts";
import { readRoof, roofLine } from "./bandwidth_roof.ts";
import { parseArgs, UsageError } from "./args.ts";
import { runCli } from "./run_cli.ts";
import { runRecord } from "./run_record.ts";
import { formatTable } from "../util/table.ts";
import { upperMedian } from "../util/sample_stats.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { userPath } from "../util/user_path.ts";

const SPEC = {
  patterns: {
    type: "list",
    default: READ_PATTERNS.map((p) => p.name),
    help: `address patterns (${READ_PATTERNS.map((p) => p.name).join(", ")})`,
  },
  configs: {
    type: "list",
    default: ["wg0k", "wg4k", "wg8k", "wg12k", "wg8k.w16", "wg8k.t3"],
    help: "configs: wgNk (a dummy workgroup array of N KB), w8 / w16 (words a lane a step), " +
      "tN (touch loads N steps ahead), sh / sw (each step's words staged through workgroup " +
      "memory as 8 f16 or as one 16-byte word, then read back), r2 (two register sets, each " +
      "loaded two steps ahead), nb (no barriers), aN (each workgroup first loads a few words of the " +
      "workgroup N places on: their address translations walked early), joined by dots",
  },
  experts: {
    type: "number",
    integer: true,
    min: 1,
    help: "experts in the layer (default 128 on a GPU, 2 on a CPU adapter)",
  },
  reps: {
    type: "number",
    integer: true,
    min: 1,
    default: 7,
    help: "timed dispatches (rounds over the layers, with --layers)",
  },
  layers: {
    type: "number",
    integer: true,
    min: 1,
    default: 1,
    help: "copies of the layer's weights, each in a buffer of its own, read in turn: past 1 " +
      "each read finds its buffer untouched since as many reads before, as a decode step " +
      "finds a layer's weights (1: the buffer just read)",
  },
  pretouch: {
    type: "number",
    integer: true,
    min: 0,
    default: 0,
    help: "KB between the 4-byte loads of a dispatch that touches the weights just before " +
      "each timed read (0: none)",
  },
  placement: {
    type: "string",
    values: PLACEMENTS,
    default: "each",
    help: "how the copies of --layers take GPU memory, as the model's --weight-placement: each " +
      "(a buffer a copy) or arena (ranges of as few buffers of at most 16 GiB as the adapter " +
      "allows, on 2 MiB): whether the driver maps larger allocations in larger pages",
  },
  json: { type: "string", help: "write the rows as JSON" },
} as const;

await runCli(async () => {
  const opts = parseArgs(
    "probe-reads",
    "GB/s of the MoE decode GEMMs' weight loads alone, per address pattern and config.",
    SPEC,
    process.argv.slice(2),
  );
  const patterns = opts.patterns.map((name) => {
    const p = READ_PATTERNS.find((q) => q.name === name);
    if (!p) throw new UsageError(`--patterns: no pattern '${name}'`);
    return p;
  });
  const configs = opts.configs.map((label) => {
    try {
      return parseConfig(label);
    } catch (err) {
      throw new UsageError(`--configs: ${(err as Error).message}`);
    }
  });
  if (1 + opts.reps * opts.layers > MAX_TIMED_PASSES) {
    throw new UsageError(
      `--reps ${opts.reps} x --layers ${opts.layers}: at most ${
        MAX_TIMED_PASSES - 1
      } timed dispatches`,
    );
  }
  const gpu = await openGpu();
  console.log(describeGpu(gpu));
  if (!gpu.f16 && configs.some((c) => c.stage === "sh")) {
    throw new UsageError("--configs: sh stages f16 values, and this adapter has no shader-f16");
  }
  const experts = opts.experts ?? (gpu.adapter.type === "cpu" ? 2 : 128);
  const roof = await readRoof(gpu);
  console.log(roofLine(roof));
  const d = gpu.device;
  const rows: Record<string, string | number | boolean | null>[] = [];
  for (const matrix of ["gu", "dn"] as const) {
    const ps = patterns.filter((p) => p.matrix === matrix);
    if (ps.length === 0) continue;
    const m = { experts, ...QWEN3_MOE_MATRICES[matrix] };
    const u32s = m.experts * m.rows * m.words * 4;
    const words = new Uint32Array(u32s);
    // each f16 half a normal finite number (exponent 1..15), so that staging them as f16 (sh)
    // moves every bit
    for (let i = 0; i < u32s; i++) {
      words[i] = ((Math.imul(i + 1, 0x9e3779b1) & 0xbfffbfff) | 0x04000400) >>> 0;
    }
    const expected = readPatternXor(words);
    // the copies, a buffer each or ranges of arenas (the model's allocator), filled on the GPU
    const source = uploadBuffer(d, `probe-reads.${matrix}`, words);
    const { ranges: layers, buffers: stores } = await allocateRanges(
      gpu,
      Array.from(
        { length: opts.layers },
        (_, k) => ({ label: `probe-reads.${matrix}.${k}`, size: words.byteLength }),
      ),
      opts.placement as Placement,
      (label, size, before) =>
        new Error(
          `probe-reads: out of GPU memory allocating ${label} (${
            (size / 2 ** 20).toFixed(0)
          } MiB) after ${(before / 2 ** 30).toFixed(2)} GiB of copies`,
        ),
      `probe-reads.${matrix} arena`,
    );
    const owned = [...stores, source];
    const fill = d.createCommandEncoder();
    for (const copy of layers) {
      fill.copyBufferToBuffer(source, 0, copy.buffer, copy.offset, words.byteLength);
    }
    d.queue.submit([fill.finish()]);
    const pretouch = opts.pretouch > 0
      ? await compilePretouch(gpu, words.byteLength, opts.pretouch * 1024)
      : null;
    const touchOut = createStorage(d, "probe-reads.pretouch", 16);
    const touchBinds = pretouch
      ? layers.map((w) => weightsAndOut(d, pretouch.pipeline, w, touchOut))
      : [];
    // the first dispatch (the last copy) untimed; then reps rounds over the copies in order, so
    // the last dispatch, whose lanes the check reads, reads the last copy
    const dispatches = 1 + opts.reps * opts.layers;
    for (const p of ps) {
      for (const c of configs) {
        const label = `${p.name}.${configLabel(c)}`;
        const rp = await compileReadPattern(gpu, p, m, c);
        const out = createStorage(d, "probe-reads.out", rp.lanes * 4);
        const binds = layers.map((w) => weightsAndOut(d, rp.pipeline, w, out));
        const timer = new PassTimer(gpu, dispatches);
        const touchTimer = pretouch ? new PassTimer(gpu, dispatches) : null;
        const enc = d.createCommandEncoder();
        for (let r = 0; r < dispatches; r++) {
          const layer = (r + layers.length - 1) % layers.length;
          if (pretouch && touchTimer) {
            const pass = enc.beginComputePass({ timestampWrites: touchTimer.next("pretouch") });
            pass.setPipeline(pretouch.pipeline);
            pass.setBindGroup(0, touchBinds[layer]);
            pass.dispatchWorkgroups(pretouch.grid[0], pretouch.grid[1]);
            pass.end();
          }
          const pass = enc.beginComputePass({ timestampWrites: timer.next(label) });
          pass.setPipeline(rp.pipeline);
          pass.setBindGroup(0, binds[layer]);
          pass.dispatchWorkgroups(rp.grid[0], rp.grid[1]);
          pass.end();
        }
        timer.resolve(enc);
        touchTimer?.resolve(enc);
        d.queue.submit([enc.finish()]);
        const spans = (await timer.read()).slice(1).map((s) => s.us);
        const touchSpans = touchTimer ? (await touchTimer.read()).slice(1).map((s) => s.us) : [];
        const lanes = new Uint32Array(await readBuffer(d, out, rp.lanes * 4));
        out.destroy();
        timer.destroy();
        touchTimer?.destroy();
        const covered = c.touch ? null : readPatternXor(lanes) === expected;
        const us = spans.length ? upperMedian(spans) : null;
        const gbps = us ? rp.bytes / (us * 1e-6) / 1e9 : null;
        rows.push({
          pattern: p.name,
          config: configLabel(c),
          us: us === null ? null : Math.round(us * 10) / 10,
          gbps: gbps === null ? null : Math.round(gbps),
          roof_share: gbps && roof
            ? Math.round((gbps * 1e9 / roof.bytesPerSecond) * 1000) / 1000
            : null,
          covered: covered === null ? "-" : covered ? "yes" : "NO",
          layers: layers.length,
          placement: opts.placement,
          buffers: stores.length,
          pretouch_kb: opts.pretouch,
          pretouch_us: touchSpans.length ? Math.round(upperMedian(touchSpans) * 10) / 10 : null,
        });
      }
    }
    for (const b of owned) b.destroy();
    touchOut.destroy();
  }
  console.log(formatTable(
    ["pattern", "config", "layers", "pretouch µs", "µs", "GB/s", "% of roof", "every word once"],
    rows.map((r) => [
      String(r.pattern),
      String(r.config),
      `${r.layers}${
        r.placement === "arena" ? ` (${r.buffers} arena${r.buffers === 1 ? "" : "s"})` : ""
      }`,
      r.pretouch_us === null ? "-" : `${r.pretouch_us} (${r.pretouch_kb} KB)`,
      r.us === null ? "-" : String(r.us),
      r.gbps === null ? "-" : String(r.gbps),
      r.roof_share === null ? "-" : `${(Number(r.roof_share) * 100).toFixed(1)}%`,
      String(r.covered),
    ]),
  ));
  for (const p of patterns) console.log(`${p.name}: ${p.what}`);
  if (opts.json) {
    writeJsonAtomic(userPath(opts.json), {
      ...runRecord(gpu),
      experts,
      roof_gbps: roof ? roof.bytesPerSecond / 1e9 : null,
      rows,
    });
  }
  gpu.destroy();
  return rows.some((r) => r.covered === "NO") ? 1 : 0;
});

/** The bind group of a probe kernel: the weights at binding 0, its output at 1. */
function weightsAndOut(
  d: GPUDevice,
  pipeline: GPUComputePipeline,
  w: BufferRange,
  out: GPUBuffer,
): GPUBindGroup {
  return d.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: w }, { binding: 1, resource: { buffer: out } }],
  });
}
