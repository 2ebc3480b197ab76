/**
 * One case table per kernel feeds both validation and timing: a case names its params,
 * how to make inputs, which outputs to compare against the CPU reference, and the bytes
 * and FLOPs it moves (for GB/s and TFLOP/s).
 *
 * ```ts
 * export const cases: KernelCase<typeof spec.params.fields>[] = [{
 *   label: "rows=7 n=300",
 *   params: { rows: 7, n: 300, eps: 1e-6 },
 *   inputs: (rng) => ({ x: rng.fillNormal(new Float32Array(2100)), weight: ... }),
 *   outputs: { out: 2100 },
 *   reference: (inp, p) => ({ out: rmsnormRef(inp.x, inp.weight, p.rows, p.n, p.eps) }),
 *   tolerance: (v) => v.dtype === "f16" ? { atol: 2e-3, rtol: 2e-3 } : { atol: 1e-5, rtol: 1e-5 },
 *   bytes: (v) => 2100 * 8 + 300 * (v.dtype === "f16" ? 2 : 4), flops: 2100 * 4,
 * }];
 * ```
 */
import type { Rng } from "../src/util/rng.ts";
import type { ParamFields, ParamValues } from "./params.ts";
import type { KernelSpec, Variant } from "./kernel.ts";

/** Host data of one binding. Float32Array for `T` bindings (converted on upload). */
export type HostArray = Float32Array | Int32Array | Uint32Array;

/** Error bound: |gpu - ref| <= atol + rtol * |ref| element-wise. */
export interface Tolerance {
  readonly atol: number;
  readonly rtol: number;
}

export interface KernelCase<F extends ParamFields> {
  readonly label: string;
  readonly params: ParamValues<F>;
  /**
   * Host inputs by binding name (read_write bindings listed here are uploaded too). They may
   * depend on the variant only through its dtype: validation draws them once per case and
   * storage type and shares them (and the reference) across that dtype's variants.
   */
  inputs(rng: Rng, variant: Variant): Record<string, HostArray>;
  /** Bindings the GPU writes, with element counts (allocated, poisoned with NaN/0xff). */
  readonly outputs: Readonly<Record<string, number>>;
  /**
   * The reference result of every compared binding, from the (rounded) inputs. It may depend
   * on the variant only through its inputs kind (case_inputs.ts `inputsKind`: dtype and f32
   * inputs): validation computes it once per case and kind and gives it to every such variant
   * (a variant's own rounding belongs in its tolerance).
   */
  reference(inputs: Record<string, HostArray>, variant: Variant): Record<string, HostArray>;
  tolerance(variant: Variant): Tolerance;
  /**
   * Tolerances of some compared bindings in place of `tolerance`'s: an f32 output beside an
   * f16 one keeps the f32 bound its own arithmetic earns (one bound a case would let an error
   * of f16's rounding size through).
   */
  bindingTolerances?(variant: Variant): Readonly<Record<string, Tolerance>>;
  /** Minimum bytes the kernel must move (each input read once, each output written once). */
  bytes(variant: Variant): number;
  readonly flops: number;
  /** Compare only on these variants (default: every supported one). */
  readonly variants?: readonly string[];
}

/**
 * A case's `variants` field: the names of those `fits` keeps, or nothing when it keeps them
 * all (a case compares every variant by default).
 */
export function fitting(
  variants: readonly Variant[],
  fits: (v: Variant) => boolean,
): { variants?: string[] } {
  const names = variants.filter(fits).map((v) => v.name);
  return names.length === variants.length ? {} : { variants: names };
}

/**
 * The contents of an output binding a form must leave unwritten (a twin writes the other one):
 * inputs and reference both hold it, so a form that writes there fails its row.
 */
export function unwrittenSentinel(length: number): Float32Array {
  return new Float32Array(length).fill(-3.5);
}

/**
 * A case as two, by the names of `variants` that `twin` picks: the other forms with `base`'s
 * fields, the twins with `twins`' (a twin form reads or writes another binding, so its inputs,
 * outputs or reference differ); a half that no form takes is left out. `variants` are the
 * case's own, or every variant of its spec.
 */
export function splitForTwins<F extends ParamFields>(
  c: KernelCase<F>,
  variants: readonly string[],
  twin: (name: string) => boolean,
  base: Partial<KernelCase<F>>,
  twins: Partial<KernelCase<F>>,
): KernelCase<F>[] {
  const names = c.variants ?? variants;
  return [
    { ...c, ...base, variants: names.filter((name) => !twin(name)) },
    { ...c, ...twins, variants: names.filter(twin) },
  ].filter((half) => half.variants.length > 0);
}

/** A kernel module as validation sees it. */
export interface KernelModule<F extends ParamFields = ParamFields> {
  readonly spec: KernelSpec<F>;
  readonly cases: readonly KernelCase<F>[];
}
