/**
 * Decode-shaped matrix-vector product `y[m, n] = sum_k x[m, k] * w[n, k]` (w in the
 * Hugging Face Linear layout [out, in]); k must be a multiple of 4.
 */
import type { HostArray, KernelCase } from "./case.ts";
import type { Rng } from "../src/util/rng.ts";
import type { ParamFields, ParamValues } from "./params.ts";
import type { Gpu } from "../src/gpu/device.ts";
import { grid1d, type KernelSpec, type Variant } from "./kernel.ts";
import {
  laneGroupColumns,
  type LaneGroupConsts,
  laneGroupVariants,
} from "./lane_group_variants.ts";
import { defineParams } from "./params.ts";

/** `splits`: 1, or the split-K parts of the lane-group forms without row blocks (y: [splits, m, n]). */
const params = defineParams({ m: "u32", n: "u32", k: "u32", accumulate: "u32", splits: "u32" });

/**
 * The one-row decode forms (one weight row a lane group, one x row a pass; gemv_norm takes
 * them too): `dec` (lanes of 8, 8 loads in flight a lane), `dec-w32` (a whole 32-wide subgroup
 * a weight row) and dec-w32 with 8 and 16 loads in flight a lane: a narrow projection (the o
 * projection's 2048 columns: 512 workgroups) leaves each SM few subgroups, each with 4 loads
 * of 8 bytes a lane. dec-w32u8 is the one-row default on the H200 (src/model/gpu_model.ts,
 * linearOneRow).
 */
export const ONE_ROW_FORMS: readonly (readonly [string, LaneGroupConsts])[] = [
  ["dec", { WG: 128, LG: 8, GC: 1, RT: 1, UNR: 8 }],
  ["dec-w32", { WG: 128, LG: 32, GC: 1, RT: 1, UNR: 4 }],
  ["dec-w32u8", { WG: 128, LG: 32, GC: 1, RT: 1, UNR: 8 }],
  ["dec-w32u16", { WG: 128, LG: 32, GC: 1, RT: 1, UNR: 16 }],
];

/**
 * The decode forms: one row (`dec`: lane groups of 8, 8 loads in flight a lane; `dec-w32`:
 * a whole 32-wide subgroup per weight row, for few output rows where lanes of 8 leave too
 * few loads in flight) or up to 8 rows a pass: `dec8` (lane groups of 8, 2 weight rows each:
 * 32 output columns a workgroup), `dec8-w32` (a 32-wide subgroup per weight row: 4 columns a
 * workgroup, 8x the workgroups of dec8 for the narrow projections) and `dec8-w32c2` (2 weight
 * rows a subgroup: half the x reads of dec8-w32 per column).
 */
function decodeVariants(): Variant[] {
  return laneGroupVariants("gemv_decode.wgsl", [
    ...ONE_ROW_FORMS,
    ["dec8", { WG: 128, LG: 8, GC: 2, RT: 8, UNR: 2 }],
    ["dec8-w32", { WG: 128, LG: 32, GC: 1, RT: 8, UNR: 4 }],
    ["dec8-w32c2", { WG: 128, LG: 32, GC: 2, RT: 8, UNR: 2 }],
    // dec8-w32c2 with its 8-row blocks side by side in grid z (9-128 rows: parallel blocks,
    // where the loop over passes in one workgroup left too few workgroups)
    ["dec8-w32c2-rb", { WG: 128, LG: 32, GC: 2, RT: 8, UNR: 2, RB: 1 }],
    ["dec8-rb", { WG: 128, LG: 8, GC: 2, RT: 8, UNR: 2, RB: 1 }],
  ]);
}

/** Staged form: 32 weight rows a workgroup, 8 invocations a row, 16 x rows, 256-wide chunks. */
const STAGED = { WG: 256, RPW: 32, KP: 8, RMAX: 16, KC: 256 } as const;

export const spec: KernelSpec<typeof params.fields> = {
  name: "gemv",
  shader: "gemv.wgsl",
  params,
  bindings: [
    { name: "x", type: "vec4<f32>", access: "read", shape: "[m, k/4]" },
    { name: "w", type: "vec4<T>", access: "read", shape: "[n, k/4]" },
    {
      name: "y",
      type: "f32",
      access: "read_write",
      shape: "[m, n] (+= when accumulate), or [splits, m, n] partial sums",
    },
  ],
  variants: [
    { name: "f32", dtype: "f32", consts: { WG: 256, MT: 4 } },
    { name: "f16", dtype: "f16", consts: { WG: 256, MT: 4 } },
    {
      name: "f16-sg",
      dtype: "f16",
      subgroups: true,
      // lid / sg_size picks its subgroup's slot: runs of consecutive invocations
      minSubgroupSize: 1,
      shader: "gemv_subgroup.wgsl",
      consts: { WG: 256, MT: 4, RPW: 4 },
    },
    // x rows staged in workgroup memory, each weight row streamed once per RMAX rows.
    { name: "f32-staged", dtype: "f32", shader: "gemv_staged.wgsl", consts: STAGED },
    { name: "f16-staged", dtype: "f16", shader: "gemv_staged.wgsl", consts: STAGED },
    // The f16 forms above with w read as 32-bit words (two f16 pairs a load, see `packed`):
    // on the H200 the plain f16 form read 8192 x 8192 at 0.44 TB/s where f32 read at 3.1.
    { name: "f16-packed", dtype: "f16", packed: true, consts: { WG: 256, MT: 4 } },
    {
      name: "f16-sg-packed",
      dtype: "f16",
      subgroups: true,
      // lid / sg_size picks its subgroup's slot: runs of consecutive invocations
      minSubgroupSize: 1,
      packed: true,
      shader: "gemv_subgroup.wgsl",
      consts: { WG: 256, MT: 4, RPW: 4 },
    },
    {
      name: "f16-staged-packed",
      dtype: "f16",
      packed: true,
      shader: "gemv_staged.wgsl",
      consts: STAGED,
    },
    // Lane groups over k, RT rows in registers a pass, subgroup shuffles: decode's few rows
    // (f16 read as 32-bit words). `dec` / `dec-w32` (32-wide subgroups) for one row, `dec8` for
    // up to 8 a pass.
    ...decodeVariants(),
    // One invocation per row, no barriers: for CPU adapters.
    {
      name: "f32-rows",
      dtype: "f32",
      shader: "gemv_rowwise.wgsl",
      consts: { WG: 64, ROWS_PER_INVOCATION: 1 },
    },
    {
      name: "f16-rows",
      dtype: "f16",
      shader: "gemv_rowwise.wgsl",
      consts: { WG: 64, ROWS_PER_INVOCATION: 1 },
    },
  ],
  grid: (p, v, gpu) =>
    v.consts?.RMAX
      ? [Math.ceil(p.n / v.consts.RPW), Math.ceil(p.m / v.consts.RMAX), 1]
      : laneGroupColumns(v) !== null
      ? laneGroupGrid(p, v, gpu)
      : v.consts?.ROWS_PER_INVOCATION
      ? grid1d(Math.ceil(p.n / v.consts.WG), gpu)
      : grid1d(Math.ceil(p.n / (v.consts?.RPW ?? 1)), gpu),
};

/**
 * A lane-group form's grid (lib/gemv_lane_groups.wgsl): its column blocks over x and y, its row
 * blocks in z (RB = 1: RT rows a workgroup).
 */
export function laneGroupGrid(
  p: { readonly m: number; readonly n: number; readonly k: number; readonly splits: number },
  v: Variant,
  gpu: Gpu,
): [number, number, number] {
  const grid = grid1d(Math.ceil(p.n / laneGroupColumns(v)!), gpu);
  // (this runs for every dispatch: the check only where k splits)
  const why = p.splits === 1 ? null : gemvSplitReason(v, p.k, p.splits);
  if (why) throw new Error(`gemv/${v.name}: ${why}`);
  const z = v.consts?.RB === 1 ? Math.ceil(p.m / v.consts.RT) : p.splits;
  if (z > 65535) throw new Error(`gemv/${v.name}: ${p.m} rows need ${z} row blocks (> 65535)`);
  return [grid[0], grid[1], z];
}

/**
 * Why `v` cannot split k = `k` in `splits` parts, or null where it can: split-K is the
 * lane-group forms' without row blocks, in parts of whole weight words.
 */
export function gemvSplitReason(v: Variant, k: number, splits: number): string | null {
  if (!Number.isInteger(splits) || splits < 1) {
    return `splits = ${splits} must be a positive integer`;
  }
  if (splits === 1) return null;
  if (laneGroupColumns(v) === null || v.consts?.RB === 1) {
    return `only the lane-group forms without row blocks split k (splits = ${splits})`;
  }
  const words = k / 4 / (v.wideWords ? 2 : 1);
  if (!Number.isInteger(words) || words % splits !== 0) {
    return `k = ${k} is not ${splits} parts of whole weight words`;
  }
  return null;
}

/**
 * Throws naming the bad field of a one-row GEMV kernel's shape (gemv_norm, gemv_scaled): m and
 * n counts, k a positive multiple of 4, eps positive.
 */
export function checkOneRowShape(
  kernel: string,
  s: { readonly m: number; readonly n: number; readonly k: number },
  eps: number,
): void {
  for (const [name, v] of [["m", s.m], ["n", s.n]] as const) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`${kernel}: ${name} = ${v} must be a count`);
  }
  if (!Number.isInteger(s.k) || s.k < 4 || s.k % 4) {
    throw new Error(`${kernel}: k = ${s.k} must be a positive multiple of 4`);
  }
  if (!(eps > 0)) throw new Error(`${kernel}: eps = ${eps} must be positive`);
}

/**
 * A case of a one-row GEMV kernel (gemv_norm, gemv_scaled): x normal (or as `x` draws it), w
 * normal, y normal where accumulating; the kernel's other inputs from `more`, its reference
 * from `reference(inputs)` (given y0 where accumulating), `moreBytes` read besides x, w and y.
 */
export function oneRowCase<F extends ParamFields>(c: {
  readonly label: string;
  readonly params: ParamValues<F>;
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly accumulate: boolean;
  readonly x?: (rng: Rng) => Float32Array;
  readonly more: (rng: Rng) => Record<string, Float32Array>;
  readonly reference: (inp: Record<string, HostArray>) => Float32Array;
  readonly moreBytes: (v: Variant) => number;
  readonly flops: number;
}): KernelCase<F> {
  const { m, n, k, accumulate } = c;
  return {
    label: `${c.label}${accumulate ? " y+=" : ""}`,
    params: c.params,
    inputs: (rng) => ({
      x: c.x?.(rng) ?? rng.fillNormal(new Float32Array(m * k)),
      ...c.more(rng),
      w: rng.fillNormal(new Float32Array(n * k), 1 / Math.sqrt(k)),
      ...(accumulate ? { y: rng.fillNormal(new Float32Array(m * n)) } : {}),
    }),
    outputs: accumulate ? {} : { y: m * n },
    reference: (inp) => ({ y: c.reference(inp) }),
    tolerance: () => ({ atol: 1e-4, rtol: 1e-4 }),
    bytes: (v) =>
      n * k * (v.dtype === "f16" ? 2 : 4) + m * k * 4 + m * n * 4 * (accumulate ? 2 : 1) +
      c.moreBytes(v),
    flops: c.flops,
  };
}

/** CPU reference: y = x w^T with f64 accumulation. */
export function matmulTransposedRef(
  x: Float32Array,
  w: Float32Array,
  m: number,
  n: number,
  k: number,
): Float32Array {
  const y = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let q = 0; q < k; q++) s += x[i * k + q] * w[j * k + q];
      y[i * n + j] = s;
    }
  }
  return y;
}

/** y + x w^T (the accumulate form's reference), or x w^T without y0. */
export function linearRef(
  x: Float32Array,
  w: Float32Array,
  m: number,
  n: number,
  k: number,
  y0?: Float32Array,
): Float32Array {
  const y = matmulTransposedRef(x, w, m, n, k);
  if (y0) { for (let i = 0; i < y.length; i++) y[i] += y0[i]; }
  return y;
}

function gemvCase(
  m: number,
  n: number,
  k: number,
  accumulate = false,
): KernelCase<typeof params.fields> {
  return {
    label: `m=${m} n=${n} k=${k}${accumulate ? " y+=" : ""}`,
    params: { m, n, k, accumulate: accumulate ? 1 : 0, splits: 1 },
    inputs: (rng) => ({
      x: rng.fillNormal(new Float32Array(m * k)),
      w: rng.fillNormal(new Float32Array(n * k), 1 / Math.sqrt(k)),
      ...(accumulate ? { y: rng.fillNormal(new Float32Array(m * n)) } : {}),
    }),
    outputs: accumulate ? {} : { y: m * n },
    reference: (inp) => ({
      y: linearRef(
        inp.x as Float32Array,
        inp.w as Float32Array,
        m,
        n,
        k,
        accumulate ? inp.y as Float32Array : undefined,
      ),
    }),
    tolerance: () => ({ atol: 1e-4, rtol: 1e-4 }),
    bytes: (v) => n * k * (v.dtype === "f16" ? 2 : 4) + m * k * 4 + m * n * 4,
    flops: 2 * m * n * k,
  };
}

/** The split-K partial sums `[splits, m, n]` of x w^T (f64 within each part). */
export function splitPartialsRef(
  x: Float32Array,
  w: Float32Array,
  m: number,
  n: number,
  k: number,
  splits: number,
): Float32Array {
  const y = new Float32Array(splits * m * n);
  const ks = k / splits;
  for (let s = 0; s < splits; s++) {
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let sum = 0;
        for (let q = s * ks; q < (s + 1) * ks; q++) sum += x[i * k + q] * w[j * k + q];
        y[(s * m + i) * n + j] = sum;
      }
    }
  }
  return y;
}

/** A split-K case: the lane-group forms without row blocks whose words split k evenly. */
function splitCase(m: number, n: number, k: number, splits: number) {
  const c: KernelCase<typeof params.fields> = {
    label: `m=${m} n=${n} k=${k} splits=${splits}`,
    // (accumulate is ignored where k splits: the partials are written)
    params: { m, n, k, accumulate: 1, splits },
    inputs: (rng) => ({
      x: rng.fillNormal(new Float32Array(m * k)),
      w: rng.fillNormal(new Float32Array(n * k), 1 / Math.sqrt(k)),
    }),
    outputs: { y: splits * m * n },
    reference: (inp) => ({
      y: splitPartialsRef(inp.x as Float32Array, inp.w as Float32Array, m, n, k, splits),
    }),
    tolerance: () => ({ atol: 1e-4, rtol: 1e-4 }),
    bytes: (v) => n * k * (v.dtype === "f16" ? 2 : 4) + m * k * 4 + splits * m * n * 4,
    flops: 2 * m * n * k,
    variants: spec.variants.filter((v) => gemvSplitReason(v, k, splits) === null).map((v) =>
      v.name
    ),
  };
  return c;
}

export const cases = [
  gemvCase(1, 7, 12),
  gemvCase(3, 301, 300),
  gemvCase(6, 45, 64, true),
  gemvCase(37, 70, 264),
  // k / 4 = 66: the decode forms' unrolled loop, then their one-step tail; dec8: 3 row passes
  gemvCase(19, 45, 264, true),
  gemvCase(64, 5120, 2048),
  gemvCase(64, 2048, 4096, true),
  gemvCase(5, 2048, 2048),
  gemvCase(1, 8192, 8192),
  // split-K: 3 parts of 96 words, the unrolled loop and its tail; the o projection in 4
  splitCase(1, 45, 384, 3),
  splitCase(3, 37, 96, 2),
  splitCase(1, 2048, 4096, 4),
];
