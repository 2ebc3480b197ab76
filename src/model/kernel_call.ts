/**
 * One kind of kernel call in the model's step (e.g. "the q|k|v projection"): the compiled
 * pipelines of the variants it may use, its params uniform (written once per step and
 * shared by every layer, whose shapes are equal), and bind groups cached per layer, so a
 * step's host work is params + dispatches, never object creation.
 *
 * ```ts
 * const call = await KernelCall.create(gpu, rmsnorm.spec, ["f16"]);
 * call.setParams({ rows: tokens, n: hidden, eps });            // once per step
 * call.dispatch(pass, "f16", `layer${l}`, { x, weight, out });  // per layer
 * ```
 */
import type { Gpu } from "../gpu/device.ts";
import { BufferUsage } from "../gpu/device.ts";
import { writeBuffer } from "../gpu/buffers.ts";
import {
  type BufferArg,
  getPipeline,
  type Grid,
  type KernelPipeline,
  type KernelSpec,
  makeBindGroup,
  variantByName,
} from "../../kernels/kernel.ts";
import type { ParamFields, ParamValues } from "../../kernels/params.ts";

export class KernelCall<F extends ParamFields> {
  private readonly bindGroups = new Map<string, GPUBindGroup>();
  private values: ParamValues<F> | null = null;
  private lastBytes: Uint8Array | null = null;

  private constructor(
    private readonly gpu: Gpu,
    readonly spec: KernelSpec<F>,
    private readonly pipes: ReadonlyMap<string, KernelPipeline<F>>,
    readonly params: GPUBuffer,
  ) {}

  /** Compiles the named variants (all must run on this device). */
  static async create<F extends ParamFields>(
    gpu: Gpu,
    spec: KernelSpec<F>,
    variants: readonly string[],
    label = spec.name,
  ): Promise<KernelCall<F>> {
    // compiled concurrently (a driver may compile them in parallel)
    const names = [...new Set(variants)];
    const built = await Promise.all(
      names.map((n) => getPipeline(gpu, spec, variantByName(spec, n))),
    );
    const pipes = new Map<string, KernelPipeline<F>>(names.map((n, i) => [n, built[i]]));
    const params = gpu.device.createBuffer({
      label: `${label}.params`,
      size: spec.params.size,
      usage: BufferUsage.UNIFORM | BufferUsage.COPY_DST,
    });
    return new KernelCall(gpu, spec, pipes, params);
  }

  /** The variants it compiled, in the order asked. */
  get variants(): string[] {
    return [...this.pipes.keys()];
  }

  /** Whether it compiled `variant`. */
  has(variant: string): boolean {
    return this.pipes.has(variant);
  }

  /** Writes this step's params (skipped when unchanged). */
  setParams(values: ParamValues<F>): void {
    const bytes = this.spec.params.pack(values);
    this.values = values;
    if (this.lastBytes && equalBytes(bytes, this.lastBytes)) return;
    writeBuffer(this.gpu.device, this.params, 0, bytes);
    this.lastBytes = new Uint8Array(bytes);
  }

  /** The params of the current step. */
  get current(): ParamValues<F> {
    if (!this.values) throw new Error(`${this.spec.name}: setParams before dispatch`);
    return this.values;
  }

  /** The workgroup grid of the current params on a variant. */
  grid(variant: string): Grid {
    return this.spec.grid(this.current, this.pipe(variant).variant, this.gpu);
  }

  /** Records one dispatch; `key` names the buffer set (bind groups are cached by it). */
  dispatch(
    pass: GPUComputePassEncoder,
    variant: string,
    key: string,
    buffers: Readonly<Record<string, BufferArg>>,
    grid: Grid = this.grid(variant),
  ): void {
    this.bind(pass, variant, key, buffers);
    if (grid[0] > 0 && grid[1] > 0 && grid[2] > 0) pass.dispatchWorkgroups(...grid);
  }

  /** Sets pipeline and bind group (for indirect dispatches the caller issues). */
  bind(
    pass: GPUComputePassEncoder,
    variant: string,
    key: string,
    buffers: Readonly<Record<string, BufferArg>>,
  ): void {
    const pipe = this.pipe(variant);
    let group = this.bindGroups.get(key);
    if (!group) {
      group = makeBindGroup(this.gpu, pipe, this.params, buffers);
      this.bindGroups.set(key, group);
    }
    pass.setPipeline(pipe.pipeline);
    pass.setBindGroup(0, group);
  }

  /** Drops cached bind groups (after buffers they name were replaced). */
  forget(): void {
    this.bindGroups.clear();
  }

  private pipe(variant: string): KernelPipeline<F> {
    const p = this.pipes.get(variant);
    if (!p) {
      throw new Error(
        `${this.spec.name}: variant ${variant} was not compiled (have ${[...this.pipes.keys()]})`,
      );
    }
    return p;
  }

  /** Frees the params buffer. */
  destroy(): void {
    this.params.destroy();
  }
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
