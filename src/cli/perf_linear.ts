/**
 * `deno task perf-linear`: the tensor-core GEMM of a decode step's several-row linear layers
 * (gemm_tc's staged and prefill forms, with split-K and its splitk_reduce) and, with `--gemv`,
 * the lane-group GEMV forms that batch 1-8 take (f32 activations, no split), alone, over as many
 * distinct weight matrices as the model has layers, so that every layer's weights come from
 * memory as in a real step and not from the GPU's cache; per (shape, variant, splits): GPU µs a
 * layer, the weights' GB/s and share of the measured read roof, TFLOP/s.
 *
 * Per shape MxNxK (m rows of activations, n output columns = weight rows, input width k): the
 * f16 activations [m padded to 128, k] (f32 [m, k] for the `-a32` forms, which round them to f16
 * themselves) and `--layers` weight matrices [n, k] are drawn on the GPU by fill_random. Per variant and split count: one untimed pass of every layer, a check of
 * the last layer's output rows 0 and m - 1 against the CPU reference (the same fill_random
 * values, f64 sums), then `--reps` timed passes (gemm + reduce per layer) and as many of the
 * gemm alone; the upper median of each, over the layers. `--splits auto` is the model's split
 * count for the variant (gemmTcSplits toward 2048 workgroups, at least the variant's
 * stagedSplitMinK of k a split).
 *
 * Adapters without f16 subgroup matrices (the software driver) run no variant: each is listed
 * as skipped with its reason, and the task exits 0.
 *
 * ```sh
 * deno task perf-linear --shapes 64x5120x2048,64x2048x4096 --variant f16-tcs64x4 --splits auto,4
 * deno task perf-linear --shapes 1x2048x4096,1x4096x2048 --variant= --gemv f16-dec-w32u8
 * ```
 */
import process from "node:process";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describeGpu, type Gpu, openGpu } from "../gpu/device.ts";
import { createStorage, readBuffer } from "../gpu/buffers.ts";
import { paced } from "../gpu/event_pacing.ts";
import { PassTimer, timeComputePass, warmComputePasses } from "../gpu/timestamps.ts";
import { KernelCall } from "../model/kernel_call.ts";
import { submitRandomFill } from "../model/random_fill.ts";
import { unsupportedReason, type Variant } from "../../kernels/kernel.ts";
import * as fillRandom from "../../kernels/fill_random.ts";
import * as gemmTc from "../../kernels/gemm_tc.ts";
import * as gemv from "../../kernels/gemv.ts";
import { wideWordsFit } from "../../kernels/lane_group_variants.ts";
import * as splitkReduce from "../../kernels/splitk_reduce.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";
import { round3, upperMedian } from "../util/sample_stats.ts";
import { roundToF16InPlace } from "../util/f16.ts";
import { parseArgs, UsageError } from "./args.ts";
import { runCli } from "./run_cli.ts";
import { runRecord } from "./run_record.ts";
import { decodeSplits, TC_MAX_SPLITS, TC_SPLIT_MAX_ROWS } from "../model/gpu_model.ts";
import { readRoof, roofLine } from "./bandwidth_roof.ts";

const SPEC = {
  shapes: {
    type: "list",
    default: [
      "32x5120x2048",
      "64x5120x2048",
      "128x5120x2048",
      "32x2048x4096",
      "64x2048x4096",
      "128x2048x4096",
    ],
    help: "MxNxK shapes: rows, output columns (weight rows), input width (default: " +
      "Qwen3-30B-A3B's qkv and o at 32, 64 and 128 rows)",
  },
  variant: {
    type: "list",
    default: ["f16-tcs32x2", "f16-tcs64x4", "f16-tcs128x8", "f16-tcp128x128"],
    help: "gemm_tc variants; a staged form runs on shapes of up to 128 rows (in row blocks " +
      "past its own), a prefill form on any",
  },
  gemv: {
    type: "list",
    default: [],
    help: "gemv variants (the one-row and few-row decode forms, e.g. f16-dec-w32u8) timed at " +
      "the same shapes, reading f32 activations as the model's do (default: none)",
  },
  splits: {
    type: "list",
    default: ["auto"],
    help: "split-K counts: auto (the model's count for the variant) or integers",
  },
  layers: {
    type: "number",
    default: 48,
    integer: true,
    min: 1,
    help: "distinct weight matrices a pass (one per layer)",
  },
  reps: { type: "number", default: 5, integer: true, min: 1, help: "timed passes" },
  warmupMs: {
    type: "number",
    default: 250,
    min: 0,
    help: "ms of untimed passes right before each row's timed ones (clocks up after the idle " +
      "check: without them a sweep's first rows on the H200 read up to 2x slow)",
  },
  json: { type: "string", help: "write the rows as JSON" },
  bandwidthGbps: {
    type: "number",
    min: 1,
    help: "read bandwidth of the roof (default: measured by read_bandwidth)",
  },
} as const;

/** Largest error of a checked output over the largest |reference| (f16 inputs, f32 sums). */
export const CHECK_TOLERANCE = 1e-3;

/** One GEMM shape. */
export interface LinearShape {
  readonly m: number;
  readonly n: number;
  readonly k: number;
}

/** Parses `MxNxK` shapes; a bad one is a UsageError naming it. */
export function parseShapes(values: readonly string[]): LinearShape[] {
  if (values.length === 0) throw new UsageError("--shapes: nothing given");
  return values.map((v) => {
    const m = /^(\d+)x(\d+)x(\d+)$/.exec(v.trim());
    const s = m ? { m: Number(m[1]), n: Number(m[2]), k: Number(m[3]) } : null;
    if (!s || s.m < 1 || !gemmTc.gemmTcFits(s.n, s.k)) {
      throw new UsageError(
        `--shapes: '${v}' is not MxNxK with m >= 1 and n, k positive multiples of 16`,
      );
    }
    return s;
  });
}

/** Parses `--splits`: "auto" or positive integers. */
export function parseSplits(values: readonly string[]): ("auto" | number)[] {
  return values.map((v) => {
    if (v === "auto") return "auto";
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1 || n > TC_MAX_SPLITS) {
      throw new UsageError(`--splits: '${v}' is neither auto nor an integer 1-${TC_MAX_SPLITS}`);
    }
    return n;
  });
}

/**
 * Why `variant` does not take `shape` (k, or rows past the staged forms' decode range), or
 * null. The staged forms take up to TC_SPLIT_MAX_ROWS rows (the model's cap), in row blocks
 * past their own (as the model runs f16-tcs64x4 at 65-128 rows since session 44); the forms
 * with column groups, meant for very many columns, and the prefill forms take any rows.
 */
export function shapeReason(variant: Variant, s: LinearShape): string | null {
  const step = gemmTc.gemmTcKStep(variant);
  if (s.k % step !== 0) return `k ${s.k} is not a multiple of its k step ${step}`;
  // the staged forms: 16-byte words, no k step const (the prefill forms have BK)
  const staged = variant.wideWords === true && variant.consts?.BK === undefined;
  if (staged && s.m > TC_SPLIT_MAX_ROWS && (variant.consts?.CS ?? 1) === 1) {
    return `${s.m} rows are more than the ${TC_SPLIT_MAX_ROWS} the staged forms take`;
  }
  return null;
}

/** The split count `want` means for a variant at a shape (`auto`: the model's, decodeSplits). */
export function splitsFor(variant: Variant, s: LinearShape, want: "auto" | number): number {
  return want === "auto" ? decodeSplits(s.m, s.n, s.k, variant) : want;
}

/** One (shape, variant, splits) measured. */
export interface LinearRow {
  /** gemm_tc (with its splitk_reduce where split), or gemv (`--gemv`, never split). */
  readonly kernel: "gemm_tc" | "gemv";
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly variant: string;
  readonly splits: number;
  readonly k_split: number;
  readonly workgroups: number;
  /** GPU µs a layer: gemm and (with splits) splitk_reduce. */
  readonly us: number;
  /** GPU µs a layer of the gemm alone. */
  readonly gemm_us: number;
  /** The weights' bytes over `us`. */
  readonly gbps: number;
  readonly roof_share: number | null;
  readonly tflops: number;
  /** Largest error of the checked rows over their largest |reference|. */
  readonly check_error: number;
}

/** A (shape, variant) not run, and why. */
export interface LinearSkip {
  readonly shape: string;
  readonly variant: string;
  readonly reason: string;
}

/**
 * The gemm_tc variants `names` names: those this adapter runs, and the others with their
 * reasons. An unknown name is a UsageError.
 */
export function selectLinearVariants(
  gpu: Gpu,
  names: readonly string[],
): { run: Variant[]; skipped: LinearSkip[] } {
  return selectVariants(gpu, gemmTc.spec, names, "--variant");
}

/** The same for the gemv variants of `--gemv`. */
export function selectGemvVariants(
  gpu: Gpu,
  names: readonly string[],
): { run: Variant[]; skipped: LinearSkip[] } {
  return selectVariants(gpu, gemv.spec, names, "--gemv");
}

function selectVariants(
  gpu: Gpu,
  spec: { readonly name: string; readonly variants: readonly Variant[] },
  names: readonly string[],
  flag: string,
): { run: Variant[]; skipped: LinearSkip[] } {
  const run: Variant[] = [], skipped: LinearSkip[] = [];
  for (const name of names) {
    const v = spec.variants.find((x) => x.name === name);
    if (!v) {
      throw new UsageError(
        `${flag}: '${name}' is not a ${spec.name} variant (${
          spec.variants.map((x) => x.name).join(", ")
        })`,
      );
    }
    const why = unsupportedReason(gpu, v);
    if (why) skipped.push({ shape: "*", variant: name, reason: why });
    else run.push(v);
  }
  return { run, skipped };
}

/** Why a gemv variant does not take `shape` (its weight words must tile k), or null. */
export function gemvShapeReason(variant: Variant, s: LinearShape): string | null {
  return wideWordsFit(variant, s.k) ? null : `k ${s.k} is not a multiple of its 8-value words`;
}

/** What benchLinear measures. */
export interface PerfLinearOptions {
  readonly shapes: readonly LinearShape[];
  /** gemm_tc variants this adapter runs (selectLinearVariants). */
  readonly variants: readonly Variant[];
  /** gemv variants this adapter runs (selectGemvVariants; default none). */
  readonly gemv?: readonly Variant[];
  readonly splits: readonly ("auto" | number)[];
  readonly layers: number;
  readonly reps: number;
  /** ms of untimed passes right before each row's timed ones (default 0: none). */
  readonly warmupMs?: number;
  /** The read roof, bytes/s (null: no roof share). */
  readonly bytesPerSecond: number | null;
}

/** Times every (shape, variant, splits); `log` gets a line per row and per skip. */
export async function benchLinear(
  gpu: Gpu,
  o: PerfLinearOptions,
  log: (line: string) => void = console.log,
): Promise<{ rows: LinearRow[]; skipped: LinearSkip[] }> {
  const rows: LinearRow[] = [], skipped: LinearSkip[] = [];
  const runnable = o.variants;
  const gemvs = o.gemv ?? [];
  if (runnable.length === 0 && gemvs.length === 0) return { rows, skipped };
  const fill = await KernelCall.create(gpu, fillRandom.spec, ["f16", "f32"]);
  const timer = new PassTimer(gpu, 2);
  try {
    for (const shape of o.shapes) {
      const label = `${shape.m}x${shape.n}x${shape.k}`;
      const fitting = (vs: readonly Variant[], reason: typeof shapeReason) =>
        vs.filter((v) => {
          const why = reason(v, shape);
          if (why) {
            skipped.push({ shape: label, variant: v.name, reason: why });
            log(`skip ${label} ${v.name}: ${why}`);
          }
          return !why;
        });
      const fits = fitting(runnable, shapeReason);
      const gemvFits = fitting(gemvs, gemvShapeReason);
      if (fits.length === 0 && gemvFits.length === 0) continue;
      // the -a32 forms and the GEMV read the activations as f32
      const f32Inputs = gemvFits.length > 0 || fits.some((v) => v.f32Inputs !== undefined);
      const state = await ShapeState.create(gpu, shape, o.layers, fill, f32Inputs);
      try {
        for (const v of fits) {
          for (const want of o.splits) {
            const row = await benchOne(gpu, o, state, v, splitsFor(v, shape, want), timer);
            rows.push(row);
            log(describeRow(row));
          }
        }
        for (const v of gemvFits) {
          const row = await benchGemv(gpu, o, state, v, timer);
          rows.push(row);
          log(describeRow(row));
        }
      } finally {
        state.destroy();
      }
    }
  } finally {
    fill.destroy();
    timer.destroy();
  }
  return { rows, skipped };
}

const A_SEED = 7;
const weightSeed = (layer: number) => 100 + layer;

/** One shape's buffers: activations, the layers' weights, outputs, split partials. */
class ShapeState {
  private readonly refRows = new Map<boolean, Float64Array>();

  private constructor(
    readonly shape: LinearShape,
    readonly a: GPUBuffer,
    /** The same activations as f32 values, where an -a32 form runs (they read these). */
    readonly a32: GPUBuffer | null,
    readonly weights: GPUBuffer[],
    readonly c: GPUBuffer,
    readonly partials: GPUBuffer,
  ) {}

  static async create(
    gpu: Gpu,
    s: LinearShape,
    layers: number,
    fill: KernelCall<typeof fillRandom.spec.params.fields>,
    f32Inputs: boolean,
  ): Promise<ShapeState> {
    const d = gpu.device;
    // rows past m stay zero (buffers start zeroed): every variant reads up to its row tile
    const rowsPad = Math.ceil(s.m / gemmTc.MAX_ROW_TILE) * gemmTc.MAX_ROW_TILE;
    // the same draws as f16 and, for the -a32 forms, as f32
    const drawn = { offset: 0, count: s.m * s.k, seed: A_SEED, base: 0, scale: 1 };
    const a = createStorage(d, "perf-linear.a", rowsPad * s.k * 2);
    submitRandomFill(gpu, fill, "f16", a, drawn);
    const a32 = f32Inputs ? createStorage(d, "perf-linear.a32", s.m * s.k * 4) : null;
    if (a32) submitRandomFill(gpu, fill, "f32", a32, drawn);
    const weights: GPUBuffer[] = [];
    for (let l = 0; l < layers; l++) {
      const w = createStorage(d, `perf-linear.w${l}`, s.n * s.k * 2);
      submitRandomFill(gpu, fill, "f16", w, {
        offset: 0,
        count: s.n * s.k,
        seed: weightSeed(l),
        base: 0,
        scale: 1 / Math.sqrt(s.k),
      });
      weights.push(w);
    }
    await paced(d.queue.onSubmittedWorkDone());
    const c = createStorage(d, "perf-linear.c", s.m * s.n * 4);
    const partials = createStorage(d, "perf-linear.partials", TC_MAX_SPLITS * s.m * s.n * 4);
    return new ShapeState(s, a, a32, weights, c, partials);
  }

  /** The CPU reference of the last layer's rows 0 and m - 1, [2, n] (f64 sums of f16 values). */
  referenceRows(f16Activations = true): Float64Array {
    const known = this.refRows.get(f16Activations);
    if (known) return known;
    const { m, n, k } = this.shape;
    const drawn = (offset: number, seed: number, scale: number, f16 = true) => {
      const x = new Float32Array(k);
      for (let i = 0; i < k; i++) x[i] = fillRandom.fillRandomValue(offset + i, seed, 0, scale);
      return f16 ? roundToF16InPlace(x) : x;
    };
    const rowsOfA = [
      drawn(0, A_SEED, 1, f16Activations),
      drawn((m - 1) * k, A_SEED, 1, f16Activations),
    ];
    const seed = weightSeed(this.weights.length - 1);
    const out = new Float64Array(2 * n);
    for (let col = 0; col < n; col++) {
      const w = drawn(col * k, seed, 1 / Math.sqrt(k));
      let s0 = 0, s1 = 0;
      for (let i = 0; i < k; i++) {
        s0 += rowsOfA[0][i] * w[i];
        s1 += rowsOfA[1][i] * w[i];
      }
      out[col] = s0;
      out[n + col] = s1;
    }
    this.refRows.set(f16Activations, out);
    return out;
  }

  destroy(): void {
    for (const b of [this.a, this.a32, this.c, this.partials, ...this.weights]) b?.destroy();
  }
}

/** One variant at one split count: warm-up, check, timed passes. */
async function benchOne(
  gpu: Gpu,
  o: PerfLinearOptions,
  state: ShapeState,
  v: Variant,
  splits: number,
  timer: PassTimer,
): Promise<LinearRow> {
  const { m, n, k } = state.shape;
  const p = gemmTc.gemmTcParams(m, n, k, false, splits, gemmTc.gemmTcKStep(v));
  const slices = Math.ceil(k / p.k_split);
  // the spec with this variant (a variant of gemm_tc's shaders that is not among its own, such
  // as the tests' emulated forms, runs too)
  const gemm = await KernelCall.create(gpu, { ...gemmTc.spec, variants: [v] }, [v.name]);
  const reduce = await KernelCall.create(gpu, splitkReduce.spec, ["f32"]);
  try {
    gemm.setParams(p);
    if (slices > 1) reduce.setParams(splitkReduce.splitkReduceParams(m * n, slices, false));
    const grid = gemm.grid(v.name);
    const encode = (pass: GPUComputePassEncoder, withReduce: boolean) => {
      state.weights.forEach((w, l) => {
        gemm.dispatch(pass, v.name, `l${l}`, {
          a: v.f32Inputs ? state.a32! : state.a,
          b: w,
          c: slices > 1 ? state.partials : state.c,
        });
        if (withReduce && slices > 1) {
          reduce.dispatch(pass, "f32", "r", { part: state.partials, out: state.c });
        }
      });
    };
    await timeComputePass(gpu, null, "perf-linear", (pass) => encode(pass, true));
    const checkError = await checkRows(gpu, state, true);
    if (o.warmupMs) {
      await warmComputePasses(gpu, "perf-linear warm-up", (pass) => encode(pass, true), o.warmupMs);
    }
    const times: number[] = [], gemmTimes: number[] = [];
    for (let r = 0; r < o.reps; r++) {
      times.push(await timeComputePass(gpu, timer, "perf-linear", (pass) => encode(pass, true)));
      gemmTimes.push(
        await timeComputePass(gpu, timer, "perf-linear gemm", (pass) => encode(pass, false)),
      );
    }
    const us = upperMedian(times) / state.weights.length;
    const gemmUs = upperMedian(gemmTimes) / state.weights.length;
    return linearRow("gemm_tc", state.shape, v.name, slices, p.k_split, grid, us, gemmUs, {
      checkError,
      bytesPerSecond: o.bytesPerSecond,
    });
  } finally {
    gemm.destroy();
    reduce.destroy();
  }
}

/** A measured row: the weights' GB/s, share of the roof and TFLOP/s from its µs a layer. */
function linearRow(
  kernel: LinearRow["kernel"],
  s: LinearShape,
  variant: string,
  splits: number,
  kSplit: number,
  grid: readonly number[],
  us: number,
  gemmUs: number,
  c: { readonly checkError: number; readonly bytesPerSecond: number | null },
): LinearRow {
  const gbps = (s.n * s.k * 2) / (us * 1e-6) / 1e9;
  return {
    kernel,
    m: s.m,
    n: s.n,
    k: s.k,
    variant,
    splits,
    k_split: kSplit,
    workgroups: grid[0] * grid[1] * grid[2],
    us,
    gemm_us: gemmUs,
    gbps,
    roof_share: c.bytesPerSecond ? (gbps * 1e9) / c.bytesPerSecond : null,
    tflops: (2 * s.m * s.n * s.k) / (us * 1e-6) / 1e12,
    check_error: c.checkError,
  };
}

/** The largest error of the last layer's rows 0 and m - 1 in `c` over their largest |reference|. */
async function checkRows(gpu: Gpu, state: ShapeState, f16Activations: boolean): Promise<number> {
  const { m, n } = state.shape;
  const got = new Float32Array(await readBuffer(gpu.device, state.c, m * n * 4));
  const ref = state.referenceRows(f16Activations);
  let maxRef = 0, maxErr = 0;
  [0, m - 1].forEach((r, i) => {
    for (let col = 0; col < n; col++) {
      const want = ref[i * n + col];
      maxRef = Math.max(maxRef, Math.abs(want));
      const e = Math.abs(got[r * n + col] - want);
      maxErr = Number.isNaN(e) ? Infinity : Math.max(maxErr, e);
    }
  });
  return maxRef > 0 ? maxErr / maxRef : maxErr;
}

/** One gemv variant: a pass of every layer, the check, timed passes (no split, no reduce). */
async function benchGemv(
  gpu: Gpu,
  o: PerfLinearOptions,
  state: ShapeState,
  v: Variant,
  timer: PassTimer,
): Promise<LinearRow> {
  const { m, n, k } = state.shape;
  const call = await KernelCall.create(gpu, { ...gemv.spec, variants: [v] }, [v.name]);
  try {
    call.setParams({ m, n, k, accumulate: 0, splits: 1 });
    const grid = call.grid(v.name);
    const encode = (pass: GPUComputePassEncoder) => {
      state.weights.forEach((w, l) => {
        call.dispatch(pass, v.name, `l${l}`, { x: state.a32!, w, y: state.c });
      });
    };
    await timeComputePass(gpu, null, "perf-linear gemv", encode);
    const checkError = await checkRows(gpu, state, false);
    if (o.warmupMs) await warmComputePasses(gpu, "perf-linear warm-up", encode, o.warmupMs);
    const times: number[] = [];
    for (let r = 0; r < o.reps; r++) {
      times.push(await timeComputePass(gpu, timer, "perf-linear gemv", encode));
    }
    const us = upperMedian(times) / state.weights.length;
    return linearRow("gemv", state.shape, v.name, 1, k, grid, us, us, {
      checkError,
      bytesPerSecond: o.bytesPerSecond,
    });
  } finally {
    call.destroy();
  }
}

function describeRow(r: LinearRow): string {
  return `${r.m}x${r.n}x${r.k} ${rowVariant(r)} ${r.splits} split${r.splits > 1 ? "s" : ""}: ` +
    `${r.us.toFixed(1)} µs a layer (gemm ${r.gemm_us.toFixed(1)}), ${r.gbps.toFixed(0)} GB/s` +
    (r.roof_share === null ? "" : ` (${(r.roof_share * 100).toFixed(1)}% of the roof)`) +
    `, check ${r.check_error.toExponential(1)}${r.check_error > CHECK_TOLERANCE ? " FAIL" : ""}`;
}

/** A row's variant as the table shows it: gemv forms named as such. */
function rowVariant(r: LinearRow): string {
  return r.kernel === "gemv" ? `gemv ${r.variant}` : r.variant;
}

/** The table: one row per (shape, variant, splits). */
export function formatRows(rows: readonly LinearRow[]): string {
  return formatTable(
    ["shape", "variant", "splits", "wgs", "µs", "gemm µs", "GB/s", "% roof", "TFLOP/s", "check"],
    rows.map((r) => [
      `${r.m}x${r.n}x${r.k}`,
      rowVariant(r),
      `${r.splits} x ${r.k_split}`,
      String(r.workgroups),
      r.us.toFixed(1),
      r.gemm_us.toFixed(1),
      r.gbps.toFixed(0),
      r.roof_share === null ? "-" : (r.roof_share * 100).toFixed(1) + "%",
      r.tflops.toFixed(1),
      `${r.check_error > CHECK_TOLERANCE ? "FAIL" : "ok"} ${r.check_error.toExponential(1)}`,
    ]),
  );
}

/** The task: parse, open the GPU, measure the roof, bench, print, write JSON. */
export async function main(argv: readonly string[]): Promise<number> {
  const o = parseArgs(
    "perf-linear",
    "Decode's several-row linear layers on the tensor-core GEMM (and, with --gemv, the " +
      "GEMV forms of 1-8 rows), against the read roof.",
    SPEC,
    argv,
  );
  const shapes = parseShapes(o.shapes);
  const splits = parseSplits(o.splits);
  const gpu = await openGpu();
  console.log(describeGpu(gpu));
  const bw = await readRoof(gpu, o.bandwidthGbps);
  console.log(roofLine(bw));
  const chosen = selectLinearVariants(gpu, o.variant);
  const chosenGemv = selectGemvVariants(gpu, o.gemv);
  for (const sk of [...chosen.skipped, ...chosenGemv.skipped]) {
    console.log(`skip ${sk.variant}: ${sk.reason}`);
  }
  const result = await benchLinear(gpu, {
    shapes,
    variants: chosen.run,
    gemv: chosenGemv.run,
    splits,
    layers: o.layers,
    reps: o.reps,
    warmupMs: o.warmupMs,
    bytesPerSecond: bw?.bytesPerSecond ?? null,
  });
  console.log("");
  if (result.rows.length) {
    console.log(
      `µs a layer: the upper median of ${o.reps} passes of ${o.layers} layers (distinct ` +
        "weights), gemm + splitk_reduce; gemm µs: the gemm alone (a gemv row: the GEMV alone)",
    );
    console.log(formatRows(result.rows));
  } else console.log("no variant ran here (see the skips above)");
  if (o.json) {
    writeJsonAtomic(userPath(o.json), {
      ...runRecord(gpu),
      bandwidth_gbps: bw ? round3(bw.bytesPerSecond / 1e9) : null,
      layers: o.layers,
      reps: o.reps,
      warmup_ms: o.warmupMs,
      rows: result.rows.map((r) => ({
        ...r,
        us: round3(r.us),
        gemm_us: round3(r.gemm_us),
        gbps: round3(r.gbps),
        roof_share: r.roof_share === null ? null : round3(r.roof_share),
        tflops: round3(r.tflops),
      })),
      skipped: [...chosen.skipped, ...chosenGemv.skipped, ...result.skipped],
    });
  }
  gpu.destroy();
  return result.rows.some((r) => r.check_error > CHECK_TOLERANCE) ? 1 : 0;
}

// Deno sets import.meta.main; Node 20 (the node-build bundle) does not: compare paths there.
const isEntry = import.meta.main ??
  (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url));
if (isEntry) await runCli(() => main(process.argv.slice(2)));
