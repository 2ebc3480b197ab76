/**
 * Sampling on the GPU: one token id per row of logits `[rows, vocab]`, greedy (argmax,
 * ties to the lowest id) where the row's temperature is 0, else temperature sampling by
 * the Gumbel-max trick with a counter-based hash keyed by the row's (seed, position), so
 * a row samples the same token whatever batch it is in, and the CPU reference reproduces
 * it. The ids `[rows]` (i32) stay on the GPU for the next step's embedding.
 *
 * ```ts
 * const sampling = packSamplingRows([{ temperature: 0, seed: 0, position: 17 },
 *   { temperature: 0.8, seed: 1234, position: 5 }]);
 * const ids = sampleRef(logits, 2, vocab, sampling);
 * ```
 */
import type { KernelCase } from "./case.ts";
import type { Gpu } from "../src/gpu/device.ts";
import {
  grid1d,
  type KernelSpec,
  unsupportedReason,
  type Variant,
  variantByName,
} from "./kernel.ts";
import { defineParams, type ParamValues } from "./params.ts";

const params = defineParams({ rows: "u32", vocab: "u32" });

export const spec: KernelSpec<typeof params.fields> = {
  name: "sample",
  shader: "sample.wgsl",
  params,
  bindings: [
    { name: "logits", type: "f32", access: "read", shape: "[rows, vocab]" },
    {
      name: "sampling",
      type: "u32",
      access: "read",
      shape: "[rows, 4] = (temperature f32 bits, seed, position, 0)",
    },
    { name: "sampled", type: "i32", access: "read_write", shape: "[rows]" },
  ],
  // "f32-wg1024": four times the invocations a row, where a device allows them (sampleVariant)
  variants: [
    { name: "f32", dtype: "f32", consts: { WG: 256, UNR: 8 } },
    { name: "f32-wg1024", dtype: "f32", consts: { WG: 1024, UNR: 8 } },
  ],
  grid: (p, _v, gpu) => grid1d(p.rows, gpu),
};

/**
 * The form for this device: 1024 invocations a row on a GPU that allows them, else 256 (CPU
 * adapters too, which pay for a large workgroup's barriers).
 */
export function sampleVariant(gpu: Gpu): Variant {
  const wide = variantByName(spec, "f32-wg1024");
  return gpu.adapter.type !== "cpu" && unsupportedReason(gpu, wide) === null
    ? wide
    : variantByName(spec, "f32");
}

/** How one row is sampled: temperature 0 is greedy. */
export interface SamplingRow {
  readonly temperature: number;
  /** u32. */
  readonly seed: number;
  /** The sampled token's position in its sequence (u32). */
  readonly position: number;
}

/** Validated params; throws naming the bad field. */
export function sampleParams(rows: number, vocab: number): ParamValues<typeof params.fields> {
  if (!Number.isInteger(rows) || rows < 0) throw new Error(`sample: rows = ${rows}`);
  if (!Number.isInteger(vocab) || vocab < 1) throw new Error(`sample: vocab = ${vocab}`);
  return { rows, vocab };
}

/** The `sampling` binding `[rows, 4]`; throws on a negative or non-finite temperature. */
export function packSamplingRows(rows: readonly SamplingRow[]): Uint32Array {
  const out = new Uint32Array(rows.length * 4);
  const f = new Float32Array(out.buffer);
  rows.forEach((r, i) => {
    if (!(r.temperature >= 0) || !Number.isFinite(r.temperature)) {
      throw new Error(`sample: row ${i} temperature ${r.temperature} must be finite and >= 0`);
    }
    for (const [name, v] of [["seed", r.seed], ["position", r.position]] as const) {
      if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) {
        throw new Error(`sample: row ${i} ${name} = ${v} must be a u32`);
      }
    }
    f[i * 4] = r.temperature;
    out[i * 4 + 1] = r.seed;
    out[i * 4 + 2] = r.position;
  });
  return out;
}

/** The lowbias32 integer hash (twin of shaders/lib/hash_u32.wgsl). */
export function hashU32(value: number): number {
  let h = value >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d) >>> 0;
  h ^= h >>> 15;
  h = Math.imul(h, 0x846ca68b) >>> 0;
  h ^= h >>> 16;
  return h >>> 0;
}

/** Per-row hash key of (seed, position). */
export function samplingKey(seed: number, position: number): number {
  return hashU32(hashU32(seed) ^ position);
}

/** The Gumbel noise -log(-log(u)) of vocabulary entry i under a row's key (f64). */
export function gumbelNoise(key: number, i: number): number {
  const h = hashU32((hashU32(i) ^ key) >>> 0);
  const u = ((h >>> 9) + 0.5) / 8388608;
  const w = 1 - u;
  const e = w < 0.0625
    ? w * (1 + w * (1 / 2 + w * (1 / 3 + w * (1 / 4 + w * (1 / 5 + w / 6)))))
    : -Math.log(u);
  return -Math.log(e);
}

/** CPU reference: the sampled id of every row. */
export function sampleRef(
  logits: Float32Array,
  rows: number,
  vocab: number,
  sampling: Uint32Array,
): Int32Array {
  const temps = new Float32Array(sampling.buffer, sampling.byteOffset, sampling.length);
  const out = new Int32Array(rows);
  for (let r = 0; r < rows; r++) {
    const temperature = temps[r * 4];
    const greedy = !(temperature > 0);
    const key = samplingKey(sampling[r * 4 + 1], sampling[r * 4 + 2]);
    let best = -Infinity, bestId = -1;
    for (let i = 0; i < vocab; i++) {
      const l = logits[r * vocab + i];
      const v = greedy ? l : l / temperature + gumbelNoise(key, i);
      if (bestId < 0 || v > best) {
        best = v;
        bestId = i;
      }
    }
    out[r] = bestId;
  }
  return out;
}

/**
 * `spread`: the logits' standard deviation. At 3 the winner hardly depends on T; flat logits
 * (0.5 over a small vocabulary) make a wrong or ignored temperature pick other tokens.
 */
function sampleCase(
  vocab: number,
  temperatures: readonly number[],
  note = "",
  ties = false,
  spread = 3,
): KernelCase<typeof params.fields> {
  const rows = temperatures.length;
  return {
    label: `rows=${rows} vocab=${vocab} T=${[...new Set(temperatures)].join("/")}${
      ties ? " ties" : ""
    } ${note}`.trim(),
    params: sampleParams(rows, vocab),
    inputs: (rng) => {
      const logits = rng.fillNormal(new Float32Array(rows * vocab), spread);
      // Whole numbers in a narrow range: every row has tied maxima.
      if (ties) {
        for (let i = 0; i < logits.length; i++) logits[i] = Math.min(2, Math.round(logits[i]));
      }
      const sampling = packSamplingRows(temperatures.map((temperature) => ({
        temperature,
        seed: rng.nextU32(),
        position: rng.int(0, 40960),
      })));
      return { logits, sampling };
    },
    outputs: { sampled: rows },
    reference: (inp) => ({
      sampled: sampleRef(inp.logits as Float32Array, rows, vocab, inp.sampling as Uint32Array),
    }),
    tolerance: () => ({ atol: 0, rtol: 0 }),
    bytes: () => rows * vocab * 4 + rows * 20,
    flops: rows * vocab * 4,
  };
}

const mixed = (rows: number) => Array.from({ length: rows }, (_, r) => [0, 0.7, 1, 1.5][r % 4]);

export const cases = [
  sampleCase(1000, [0]),
  sampleCase(1001, [0, 0.7, 1, 1.5, 0, 1]),
  sampleCase(37, mixed(9), "", true),
  sampleCase(5, [1, 1, 1, 1, 0.5, 0.5, 2, 2]),
  sampleCase(64, [0.25, 0.5, 2, 4, 0.25, 0.5, 2, 4, 0, 1], "flat logits", false, 0.5),
  sampleCase(151936, [0], "qwen3 vocab"),
  sampleCase(151936, [0.7], "qwen3 vocab"),
  sampleCase(151936, mixed(64), "qwen3 vocab"),
  sampleCase(151936, mixed(128), "qwen3 vocab"),
];
