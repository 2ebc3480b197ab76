/**
 * What a kernel module declares, and the one pipeline cache that turns a declaration and
 * a variant into a compiled compute pipeline.
 *
 * A kernel's WGSL file in shaders/ holds only its functions and entry point `main`; the
 * prelude (enables, the storage type alias `T`, constants, the Params struct, and every
 * binding declaration) is generated here from the declaration, so binding order and the
 * params layout are written in exactly one place.
 *
 * ```ts
 * const pipe = await getPipeline(gpu, rmsnorm, variantByName(rmsnorm, "f16"));
 * const bind = makeBindGroup(gpu, pipe, { params, x, weight, out });
 * pass.setPipeline(pipe.pipeline); pass.setBindGroup(0, bind);
 * pass.dispatchWorkgroups(...rmsnorm.grid(values, pipe.variant, gpu));
 * ```
 */
import type { Gpu } from "../src/gpu/device.ts";
import { hasSubgroupMatrix } from "../src/gpu/device.ts";
import {
  assembleWgsl,
  compileWgsl,
  readShaderSegments,
  type WgslSegment,
} from "../src/gpu/wgsl.ts";
import { paced } from "../src/gpu/event_pacing.ts";
import type { ParamFields, ParamsLayout, ParamValues } from "./params.ts";

/** One storage binding: `var<storage, access> name: array<type>` (`// shape` as doc). */
export interface BindingSpec {
  readonly name: string;
  /** Element type; `T` is the variant's storage type (f16 or f32). */
  readonly type: string;
  readonly access: "read" | "read_write";
  /** Shape comment, e.g. "[tokens, hidden]". */
  readonly shape: string;
}

/** A compiled form of the kernel: storage type, optional features, constants. */
export interface Variant {
  readonly name: string;
  readonly dtype: "f16" | "f32";
  readonly subgroups?: boolean;
  /** Subgroup matrix (f16 -> f32 accumulate) at this M x N x K shape. */
  readonly subgroupMatrix?: { readonly m: number; readonly n: number; readonly k: number };
  /** `const NAME: u32 = value;` lines in the prelude. */
  readonly consts?: Readonly<Record<string, number>>;
  /** A WGSL file of its own for this variant (default: the kernel's). */
  readonly shader?: string;
  /**
   * f16 only: read-only `vec4<T>` bindings are declared as `vec2<u32>` (the same bytes) and
   * read through `t4`, which unpacks two f16 pairs: 32-bit storage loads instead of 16-bit
   * ones (see `preludeOf`).
   */
  readonly packed?: boolean;
  /**
   * f16 only: read-only `T` and `vec4<T>` bindings are declared as `vec4<u32>` (the same
   * bytes, 8 values a word): 16-byte storage loads, unpacked with `bitcast<vec2<f16>>`. The
   * binding's length in f16 values must then be a multiple of 8.
   */
  readonly wideWords?: boolean;
  /**
   * Bindings this form declares read_write whatever the spec says: one it writes, or one its
   * driver reads slower when declared read-only. On the H200's Vulkan driver some 16-byte-word
   * reads are: f16-tcdw2h's K and V caches (79% of the read roof read-only, 87% read_write;
   * kernels/paged_attention_decode.ts), gemm_tc's operands and the MoE gate/up weights; others
   * are not (the MoE down GEMM's), so each form says what it measured. With wideWords they stay
   * 16-byte words.
   */
  readonly readWrite?: readonly string[];
  /**
   * Read-only `T` bindings that this variant reads as f32 values instead (declared
   * `vec4<f32>`, 4 values an element): a wide-words form that converts them to f16 itself, so
   * no cast kernel runs before it. Validation uploads them as f32 (see `storesT`).
   */
  readonly f32Inputs?: readonly string[];
  /**
   * Read-only `vec4<T>` bindings are declared as `array<T>` (the same bytes, 4 values an
   * element): subgroup matrix loads straight from storage take an array of the matrix's
   * component type.
   */
  readonly scalarReads?: boolean;
  /**
   * Several 32-wide subgroups a workgroup, each with its own subgroup-matrix offsets (subgroup
   * r = invocations 32 r .. 32 r + 31): the prelude turns off Tint's subgroup-matrix uniformity
   * check (`diagnostic(off, chromium.subgroup_matrix_uniformity)`), which otherwise asks every
   * matrix offset to be the same in the whole workgroup. Needs consecutive subgroup lanes.
   */
  readonly perSubgroupMatrices?: boolean;
  /**
   * Subgroups of at least this size, laid out as runs of consecutive invocations (lane groups
   * that meet through subgroup shuffles; see Gpu.subgroupLanesConsecutive).
   */
  readonly minSubgroupSize?: number;
  /** Subgroups of exactly this size (a kernel whose lanes map one to one onto keys). */
  readonly subgroupSize?: number;
  /**
   * The workgroup memory its shader declares, in bytes, where it may pass a device's limit
   * (maxComputeWorkgroupStorageSize: 16 KiB by default, 32 KiB on lavapipe, 48 KiB on the H200).
   */
  readonly workgroupBytes?: number;
  /**
   * The MoE expert weights (the spec's `expertWeights` binding) are stored in tiles of 16 rows x
   * 64 columns (kernels/expert_tiles.ts), not row by row; the prelude says so to
   * lib/expert_tiles.wgsl (`EXPERT_TILES`), and validation uploads the case's weights so.
   */
  readonly expertTiles?: boolean;
}

/** Workgroup-count grid of one dispatch. */
export type Grid = readonly [number, number, number];

/** The declaration every kernel module exports. */
export interface KernelSpec<F extends ParamFields> {
  readonly name: string;
  /** WGSL file in shaders/. */
  readonly shader: string;
  readonly params: ParamsLayout<F>;
  /** Bindings 1..n in order (binding 0 is always `params: Params`, a uniform). */
  readonly bindings: readonly BindingSpec[];
  readonly variants: readonly Variant[];
  /**
   * The binding that holds MoE expert weight matrices ([experts, rows, cols] row by row, or in
   * tiles for variants with `expertTiles`) and their shape for given params.
   */
  readonly expertWeights?: {
    readonly binding: string;
    rows(params: ParamValues<F>): number;
    cols(params: ParamValues<F>): number;
  };
  /** Workgroup counts for given params on a variant. */
  grid(params: ParamValues<F>, variant: Variant, gpu: Gpu): Grid;
}

/** Why a variant cannot run on this device, or null when it can. */
export function unsupportedReason(gpu: Gpu, variant: Variant): string | null {
  if (variant.dtype === "f16" && !gpu.f16) return "no shader-f16";
  const wg = variant.consts?.WG ?? 0;
  const maxWg = gpu.limits.maxComputeInvocationsPerWorkgroup ?? 256;
  if (wg > maxWg) return `workgroups of ${wg} invocations (this device takes ${maxWg})`;
  const bytes = variant.workgroupBytes ?? 0;
  const maxBytes = gpu.limits.maxComputeWorkgroupStorageSize ?? 16384;
  if (bytes > maxBytes) {
    return `${bytes} bytes of workgroup memory (this device takes ${maxBytes})`;
  }
  if (variant.subgroups && !gpu.subgroups) return "no subgroups";
  const minSg = variant.minSubgroupSize ?? 0;
  if (variant.subgroups && gpu.subgroupMinSize < minSg) {
    return `needs subgroups of at least ${minSg} (have ${gpu.subgroupMinSize}..${gpu.subgroupMaxSize})`;
  }
  const exact = variant.subgroupSize;
  if (
    variant.subgroups && exact && (gpu.subgroupMinSize !== exact || gpu.subgroupMaxSize !== exact)
  ) {
    return `needs subgroups of exactly ${exact} (have ${gpu.subgroupMinSize}..${gpu.subgroupMaxSize})`;
  }
  if (variant.subgroups && minSg > 0 && !gpu.subgroupLanesConsecutive) {
    return "its lane groups need subgroups of consecutive invocations, which this device does not have";
  }
  const sm = variant.subgroupMatrix;
  if (sm && !hasSubgroupMatrix(gpu, "f16", "f32", sm.m, sm.n, sm.k)) {
    return `no f16->f32 ${sm.m}x${sm.n}x${sm.k} subgroup matrix`;
  }
  // The subgroup-matrix kernels run 32-wide subgroups (NVIDIA's size), one a workgroup or,
  // with perSubgroupMatrices, several of consecutive invocations.
  if (sm && (gpu.subgroupMinSize !== 32 || gpu.subgroupMaxSize !== 32)) {
    return `subgroup-matrix kernels need subgroups of exactly 32 (have ${gpu.subgroupMinSize}..${gpu.subgroupMaxSize})`;
  }
  if (variant.perSubgroupMatrices && !gpu.subgroupLanesConsecutive) {
    return "its subgroups must be runs of consecutive invocations, which this device does not have";
  }
  return null;
}

/** The variants of a kernel that run on this device. */
export function supportedVariants<F extends ParamFields>(
  gpu: Gpu,
  kernel: KernelSpec<F>,
): Variant[] {
  return kernel.variants.filter((v) => unsupportedReason(gpu, v) === null);
}

/** Looks a variant up by name; throws listing the known ones. */
export function variantByName<F extends ParamFields>(kernel: KernelSpec<F>, name: string): Variant {
  const v = kernel.variants.find((x) => x.name === name);
  if (!v) {
    throw new Error(
      `kernel ${kernel.name} has no variant '${name}' (known: ${
        kernel.variants.map((x) => x.name).join(", ")
      })`,
    );
  }
  return v;
}

/** A binding's access as a variant declares it (Variant.readWrite over the spec's). */
export function bindingAccess(b: BindingSpec, variant: Variant): "read" | "read_write" {
  return variant.readWrite?.includes(b.name) ? "read_write" : b.access;
}

/** The generated prelude of a kernel variant (exported for tests and error messages). */
export function preludeOf<F extends ParamFields>(
  kernel: KernelSpec<F>,
  variant: Variant,
  extraConsts: Readonly<Record<string, number>> = {},
): string {
  const lines: string[] = [];
  if (variant.dtype === "f16") lines.push("enable f16;");
  if (variant.subgroups || variant.subgroupMatrix) lines.push("enable subgroups;");
  if (variant.subgroupMatrix) lines.push("enable chromium_experimental_subgroup_matrix;");
  if (variant.perSubgroupMatrices) {
    if (!variant.subgroupMatrix) {
      throw new Error(`${kernel.name}/${variant.name}: perSubgroupMatrices needs subgroupMatrix`);
    }
    lines.push("diagnostic(off, chromium.subgroup_matrix_uniformity);");
  }
  lines.push(`alias T = ${variant.dtype};`);
  // T's largest finite value: a value stored as T clamped to it stays finite (f16: 65504)
  lines.push(`const T_MAX: f32 = ${variant.dtype === "f16" ? "65504.0" : "0x1.fffffep+127"};`);
  lines.push(`const EXPERT_TILES: bool = ${variant.expertTiles === true};`);
  const consts = { ...variant.consts, ...extraConsts };
  for (const [k, v] of Object.entries(consts)) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`const ${k} = ${v} must be a u32`);
    lines.push(`const ${k}: u32 = ${v}u;`);
  }
  if (variant.subgroupMatrix) {
    const { m, n, k } = variant.subgroupMatrix;
    lines.push(`const SM_M: u32 = ${m}u;`, `const SM_N: u32 = ${n}u;`, `const SM_K: u32 = ${k}u;`);
  }
  lines.push(kernel.params.wgsl);
  lines.push("@group(0) @binding(0) var<uniform> params: Params;");
  if (variant.packed && variant.dtype !== "f16") {
    throw new Error(`${kernel.name}/${variant.name}: a packed variant stores f16`);
  }
  if (variant.wideWords && variant.dtype !== "f16") {
    throw new Error(`${kernel.name}/${variant.name}: a wide-words variant stores f16`);
  }
  kernel.bindings.forEach((b, i) => {
    const f32 = variant.f32Inputs?.includes(b.name) ?? false;
    if (f32 && (b.type !== "T" || b.access !== "read" || !variant.wideWords)) {
      throw new Error(
        `${kernel.name}/${variant.name}: f32Inputs names '${b.name}', not a read-only T binding of a wide-words form`,
      );
    }
    const scalar = variant.scalarReads && b.type === "vec4<T>" && b.access === "read";
    const rw = variant.readWrite?.includes(b.name) ?? false;
    // read as words: read-only T and vec4<T> bindings of a wide-words form, and the vec4<T>
    // ones it declares read_write
    const words = variant.wideWords && (b.type === "T" || b.type === "vec4<T>") &&
      (b.access === "read" || (b.type === "vec4<T>" && rw));
    const type = f32
      ? "vec4<f32>"
      : variant.packed && b.type === "vec4<T>" && b.access === "read"
      ? "vec2<u32>"
      : scalar
      ? "T"
      : words
      ? "vec4<u32>"
      : b.type;
    // a vec4 binding read as scalars: its last dimension counts values, not vec4s; as wide
    // words, two vec4s a word
    const shape = f32
      ? `${b.shape} f32, 4 values an element`
      : scalar
      ? b.shape.replace(/ \/ 4\]$/, "]")
      : words && b.type === "vec4<T>"
      ? b.shape.replace(/ \/ 4\]$/, " / 8]")
      : b.shape;
    lines.push(
      `@group(0) @binding(${i + 1}) var<storage, ${
        bindingAccess(b, variant)
      }> ${b.name}: array<${type}>; // ${shape}`,
    );
  });
  // T4: an element of a read-only vec4<T> binding as declared (vec2<u32> when packed); t4: its
  // four values as f32.
  lines.push(
    variant.packed ? "alias T4 = vec2<u32>;" : "alias T4 = vec4<T>;",
    variant.packed
      ? "fn t4(v: T4) -> vec4<f32> { return vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)); }"
      : "fn t4(v: T4) -> vec4<f32> { return vec4<f32>(v); }",
  );
  // TW: a word of a read-only vec4<T> binding as declared (T4, or 8 values in a vec4<u32> where
  // wideWords); WV: vec4s of values a word; tw(v, h): its h-th four values as f32
  // (lib/lane_group_dots.wgsl reads its weights so)
  lines.push(
    ...(variant.wideWords
      ? [
        "alias TW = vec4<u32>;",
        "const WV: u32 = 2u;",
        "fn tw(v: TW, h: u32) -> vec4<f32> { let p = select(v.xy, v.zw, h == 1u); " +
        "return vec4<f32>(vec2<f32>(bitcast<vec2<f16>>(p.x)), vec2<f32>(bitcast<vec2<f16>>(p.y))); }",
      ]
      : [
        "alias TW = T4;",
        "const WV: u32 = 1u;",
        "fn tw(v: TW, h: u32) -> vec4<f32> { return t4(v); }",
      ]),
  );
  return lines.join("\n");
}

/** A compiled pipeline with what it was compiled from. */
export interface KernelPipeline<F extends ParamFields = ParamFields> {
  readonly kernel: KernelSpec<F>;
  readonly variant: Variant;
  readonly pipeline: GPUComputePipeline;
  readonly layout: GPUBindGroupLayout;
}

const pipelineCache = new WeakMap<GPUDevice, Map<string, Promise<KernelPipeline>>>();

/**
 * The cached pipeline of (kernel, variant, extra constants) on this device. Compiles on
 * first use; a WGSL error throws WgslCompileError naming shader file and line.
 */
export function getPipeline<F extends ParamFields>(
  gpu: Gpu,
  kernel: KernelSpec<F>,
  variant: Variant,
  extraConsts: Readonly<Record<string, number>> = {},
): Promise<KernelPipeline<F>> {
  let cache = pipelineCache.get(gpu.device);
  if (!cache) pipelineCache.set(gpu.device, cache = new Map());
  const key = `${kernel.name}/${variant.name}/${JSON.stringify(extraConsts)}`;
  let hit = cache.get(key);
  if (!hit) {
    hit = buildPipeline(gpu, kernel, variant, extraConsts) as Promise<KernelPipeline>;
    cache.set(key, hit);
    hit.catch(() => cache!.delete(key));
  }
  return hit as Promise<KernelPipeline<F>>;
}

/**
 * The named variants that compile on this device, each compiled (and cached); one that does
 * not is reported on stderr as left out (`who` names the caller), not thrown.
 */
export async function compiledVariants<F extends ParamFields>(
  gpu: Gpu,
  kernel: KernelSpec<F>,
  names: readonly string[],
  who: string,
): Promise<string[]> {
  // compiled concurrently (a driver may compile them in parallel), reported in order
  const built = await Promise.allSettled(
    names.map((name) => getPipeline(gpu, kernel, variantByName(kernel, name))),
  );
  const ok: string[] = [];
  built.forEach((b, i) => {
    if (b.status === "fulfilled") ok.push(names[i]);
    else console.error(`${who}: ${kernel.name}/${names[i]} left out: ${b.reason.message}`);
  });
  return ok;
}

async function buildPipeline<F extends ParamFields>(
  gpu: Gpu,
  kernel: KernelSpec<F>,
  variant: Variant,
  extraConsts: Readonly<Record<string, number>>,
): Promise<KernelPipeline<F>> {
  const reason = unsupportedReason(gpu, variant);
  if (reason) throw new Error(`kernel ${kernel.name} variant ${variant.name}: ${reason}`);
  const segments: WgslSegment[] = [
    {
      file: `<prelude of ${kernel.name}/${variant.name}>`,
      text: preludeOf(kernel, variant, extraConsts),
    },
    ...readShaderSegments(variant.shader ?? kernel.shader),
  ];
  const label = `${kernel.name}/${variant.name}`;
  const module = await compileWgsl(gpu.device, assembleWgsl(segments), label);
  const layout = gpu.device.createBindGroupLayout({
    label,
    entries: [
      { binding: 0, visibility: GPU_SHADER_STAGE_COMPUTE, buffer: { type: "uniform" } },
      ...kernel.bindings.map((b, i) => ({
        binding: i + 1,
        visibility: GPU_SHADER_STAGE_COMPUTE,
        buffer: {
          type: bindingAccess(b, variant) === "read"
            ? "read-only-storage" as const
            : "storage" as const,
        },
      })),
    ],
  });
  // the scope is popped before any await: pipelines built concurrently each get their own (the
  // wait paced, as compileWgsl's)
  gpu.device.pushErrorScope("validation");
  const created = gpu.device.createComputePipelineAsync({
    label,
    layout: gpu.device.createPipelineLayout({ bindGroupLayouts: [layout] }),
    compute: { module, entryPoint: "main" },
  });
  const scope = gpu.device.popErrorScope();
  const [settled, err] = await paced(Promise.all([
    created.then((p) => ({ p, e: null }), (e: Error) => ({ p: null, e })),
    scope,
  ]));
  if (settled.e) throw new Error(`pipeline ${label}: ${settled.e.message}`);
  const pipeline = settled.p!;
  if (err) throw new Error(`pipeline ${label}: ${err.message}`);
  return { kernel, variant, pipeline, layout };
}

const GPU_SHADER_STAGE_COMPUTE = 4;

/** A buffer or a range of one. */
export type BufferArg = GPUBuffer | GPUBufferBinding;

/** Binds `params` and every named binding of the kernel; a missing name is an error. */
export function makeBindGroup<F extends ParamFields>(
  gpu: Gpu,
  pipe: KernelPipeline<F>,
  params: BufferArg,
  buffers: Readonly<Record<string, BufferArg>>,
): GPUBindGroup {
  const entry = (binding: number, arg: BufferArg): GPUBindGroupEntry => ({
    binding,
    resource: "buffer" in arg ? arg : { buffer: arg },
  });
  const known = new Set(pipe.kernel.bindings.map((b) => b.name));
  for (const name of Object.keys(buffers)) {
    if (!known.has(name)) throw new Error(`kernel ${pipe.kernel.name} has no binding '${name}'`);
  }
  return gpu.device.createBindGroup({
    label: pipe.kernel.name,
    layout: pipe.layout,
    entries: [
      entry(0, params),
      ...pipe.kernel.bindings.map((b, i) => {
        const arg = buffers[b.name];
        if (!arg) throw new Error(`kernel ${pipe.kernel.name}: binding '${b.name}' not given`);
        return entry(i + 1, arg);
      }),
    ],
  });
}

/**
 * Splits a 1-D count of workgroups into a grid within maxComputeWorkgroupsPerDimension;
 * shaders recover the index as `wid.x + wid.y * nwg.x` and skip indices >= count.
 */
export function grid1d(count: number, gpu: Gpu): Grid {
  const max = gpu.limits.maxComputeWorkgroupsPerDimension ?? 65535;
  if (count <= max) return [Math.max(1, count), 1, 1];
  const y = Math.ceil(count / max);
  return [Math.ceil(count / y), y, 1];
}
