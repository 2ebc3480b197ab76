/**
 * A case's inputs as the GPU sees them, their fingerprint and the key of their reference:
 * shared by validateCase and
 * the reference pool's workers, which need none of validateCase's GPU path (a worker never
 * opens a device, though the kernel modules' imports still load dawn.node there).
 *
 * ```ts
 * const inputs = caseInputs(gemm, gemm.cases[0], variant); // seeded, f16-rounded where stored so
 * fingerprint(inputs);                                      // "a:20:...|b:..."
 * ```
 */
import { roundToF16InPlace } from "../src/util/f16.ts";
import { Rng } from "../src/util/rng.ts";
import type { HostArray, KernelCase, KernelModule } from "./case.ts";
import type { Variant } from "./kernel.ts";
import type { ParamFields } from "./params.ts";

/** Whether a binding's element type is the storage type T (f16 or f32 by variant). */
export const usesT = (type: string): boolean => /\bT\b/.test(type);

/**
 * Whether a binding holds the storage type T in memory for this variant: it uses T and the
 * variant does not read it as f32 (Variant.f32Inputs).
 */
export function storesT(binding: { name: string; type: string }, variant: Variant): boolean {
  return usesT(binding.type) && !(variant.f32Inputs?.includes(binding.name) ?? false);
}

/**
 * What a variant's inputs depend on besides the case: its storage type and the bindings it reads
 * as f32 (Variant.f32Inputs: those stay unrounded). Inputs and references are shared, cached and
 * requested by it.
 */
export function inputsKind(variant: Variant): string {
  const f32 = variant.f32Inputs ?? [];
  return f32.length ? `${variant.dtype}+f32:${f32.join(",")}` : variant.dtype;
}

/**
 * A case's host inputs as a variant sees them: drawn from the case's seeded generator, and
 * rounded to f16 where the binding holds the storage type T and the variant stores f16 (so
 * the CPU reference sees what the GPU sees; a binding the variant reads as f32 stays as drawn,
 * and the variant rounds it itself). Deterministic: a reference worker draws the same.
 */
export function caseInputs<F extends ParamFields>(
  module: KernelModule<F>,
  kcase: KernelCase<F>,
  variant: Variant,
): Record<string, HostArray> {
  const rng = Rng.fromSeed(`${module.spec.name}/${kcase.label}`);
  const inputs = kcase.inputs(rng, variant);
  if (variant.dtype === "f16") {
    for (const b of module.spec.bindings) {
      const data = inputs[b.name];
      if (data instanceof Float32Array && storesT(b, variant)) roundToF16InPlace(data);
    }
  }
  return inputs;
}

/** A cheap digest of a case's inputs (a reference is reused only for equal digests). */
export function fingerprint(inputs: Record<string, HostArray>): string {
  const parts: string[] = [];
  for (const [name, data] of Object.entries(inputs)) {
    let sum = 0;
    const step = Math.max(1, Math.floor(data.length / 97));
    for (let i = 0; i < data.length; i += step) sum += data[i] * ((i % 13) + 1);
    parts.push(`${name}:${data.length}:${sum}:${data[data.length - 1]}`);
  }
  return parts.join("|");
}

/** The key of a case's CPU reference: one per kernel, case and inputs kind (inputsKind). */
export function referenceKey(kernel: string, label: string, kind: string): string {
  return `${kernel}\u0000${label}\u0000${kind}`;
}

/**
 * Inputs shared by the rows that see the same ones: one draw per (kernel, case, storage
 * type), held until its last expected row takes it. Production-shaped inputs take seconds
 * to draw in TypeScript (a 8192 x 8192 GEMV's normals), so validate runs a case's variants
 * together and draws once; expect() every row first, then take() once per row.
 */
export class InputCache {
  readonly #uses = new Map<string, number>();
  readonly #held = new Map<string, Record<string, HostArray>>();

  /** A row that will take this case's inputs for this variant's dtype. */
  expect<F extends ParamFields>(module: KernelModule<F>, kcase: KernelCase<F>, v: Variant): void {
    const key = referenceKey(module.spec.name, kcase.label, inputsKind(v));
    this.#uses.set(key, (this.#uses.get(key) ?? 0) + 1);
  }

  /** The inputs (drawn now or earlier); the last expected row's take drops them. */
  take<F extends ParamFields>(
    module: KernelModule<F>,
    kcase: KernelCase<F>,
    v: Variant,
  ): Record<string, HostArray> {
    const key = referenceKey(module.spec.name, kcase.label, inputsKind(v));
    const inputs = this.#held.get(key) ?? caseInputs(module, kcase, v);
    const left = (this.#uses.get(key) ?? 0) - 1;
    if (left > 0) {
      this.#uses.set(key, left);
      this.#held.set(key, inputs);
    } else {
      this.#uses.delete(key);
      this.#held.delete(key);
    }
    return inputs;
  }

  /** Inputs held now (a run in case order holds at most one case's). */
  get held(): number {
    return this.#held.size;
  }
}
