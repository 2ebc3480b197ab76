/**
 * Opens a Dawn (dawn.node) WebGPU device on the best adapter, with the toggles and
 * features that make f16, subgroups, subgroup matrices and unquantized timestamps
 * appear, and reports what was actually obtained.
 *
 * ```ts
 * const gpu = await openGpu();
 * console.log(describeGpu(gpu));
 * gpu.destroy();
 * ```
 */
import { create, globals } from "webgpu";
import process from "node:process";
import { subgroupLanesAreConsecutive } from "./subgroup_layout.ts";

/** Spec constants, taken from Dawn's globals (Deno's own WebGPU globals are wgpu's). */
const dawnGlobals = globals as unknown as {
  GPUBufferUsage: typeof GPUBufferUsage;
  GPUMapMode: typeof GPUMapMode;
};
export const BufferUsage = dawnGlobals.GPUBufferUsage;
export const MapMode = dawnGlobals.GPUMapMode;

/** A subgroup-matrix configuration offered by the adapter (Dawn experimental feature). */
export interface SubgroupMatrixConfig {
  componentType: string;
  resultComponentType: string;
  M: number;
  N: number;
  K: number;
}

/** The device and everything learned about it when it was opened. Frozen. */
export interface Gpu {
  readonly device: GPUDevice;
  readonly adapter: {
    vendor: string;
    architecture: string;
    device: string;
    description: string;
    driver: string;
    backend: string;
    type: string;
  };
  readonly features: ReadonlySet<string>;
  readonly limits: Readonly<Record<string, number>>;
  readonly f16: boolean;
  readonly subgroups: boolean;
  readonly timestamps: boolean;
  /**
   * Subgroups are runs of consecutive invocations (lane = lid % size), as the lane-group
   * kernels need (see subgroup_layout.ts); false without subgroups.
   */
  readonly subgroupLanesConsecutive: boolean;
  /** Subgroup sizes the adapter may run with; shaders read the real one at run time. */
  readonly subgroupMinSize: number;
  readonly subgroupMaxSize: number;
  /** Empty where the adapter has no subgroup-matrix feature (lavapipe). */
  readonly subgroupMatrixConfigs: readonly SubgroupMatrixConfig[];
  readonly toggles: { enabled: readonly string[]; disabled: readonly string[] };
  destroy(): void;
}

/** Thrown when no WebGPU adapter exists; the CLI turns it into exit code 2. */
export class NoAdapterError extends Error {
  constructor(detail: string) {
    // (the offline bundle's run script sets WEBFPM_BUNDLE: no setup script and no network there)
    const install = process.env.WEBFPM_BUNDLE
      ? `webfpm runs on Dawn's Vulkan backend: install your GPU's Vulkan driver on this host\n` +
        `(the bundle carries the Vulkan loader, not a driver).\n`
      : `webfpm runs on Dawn's Vulkan backend: install your GPU's Vulkan driver, or run\n` +
        `  sudo scripts/setup\n` +
        `which installs Mesa's software Vulkan driver (lavapipe) from Debian bookworm-backports.\n`;
    super(
      `no WebGPU adapter found (${detail}).\n` + install +
        `With a driver in a non-standard place, point VK_DRIVER_FILES at its ICD json.`,
    );
    this.name = "NoAdapterError";
  }
}

export const ENABLED_TOGGLES = [
  "allow_unsafe_apis",
  "vulkan_enable_f16_on_nvidia",
  "use_vulkan_memory_model",
  "disable_robustness",
  "disable_workgroup_init",
  "skip_validation",
] as const;
export const DISABLED_TOGGLES = ["timestamp_quantization"] as const;

const WANTED_FEATURES = [
  "shader-f16",
  "subgroups",
  "timestamp-query",
  "chromium-experimental-subgroup-matrix",
  "subgroup-size-control",
] as const;

export interface OpenGpuOptions {
  /** Adapter name substring (Dawn's `adapter=` option). Default: env WEBFPM_ADAPTER. */
  adapterName?: string;
  /** Refuse f16 even where offered (to exercise the f32 path). */
  noF16?: boolean;
  /** Refuse subgroups / subgroup matrices even where offered. */
  noSubgroups?: boolean;
  /** Refuse subgroup matrices (tensor cores) only. Default: env WEBFPM_NO_SUBGROUP_MATRIX=1. */
  noSubgroupMatrix?: boolean;
  /**
   * Keep Dawn's validation on (without the `skip_validation` toggle): every misuse of the API is
   * reported as an error, at some cost in host time a call. Default: env WEBFPM_DAWN_VALIDATION=1.
   */
  validation?: boolean;
}

/** The toggles a device opens with: ENABLED_TOGGLES, less `skip_validation` with validation. */
function enabledToggles(validation: boolean): readonly string[] {
  return validation ? ENABLED_TOGGLES.filter((t) => t !== "skip_validation") : ENABLED_TOGGLES;
}

/** One Dawn instance with validation and one without (a named adapter gets its own). */
const dawnInstances = new Map<boolean, GPU>();
function dawn(adapterName: string | undefined, validation: boolean): GPU {
  if (!process.env.XDG_RUNTIME_DIR) process.env.XDG_RUNTIME_DIR = "/tmp";
  const cached = dawnInstances.get(validation);
  if (cached && !adapterName) return cached;
  const flags = [
    "backend=vulkan",
    `enable-dawn-features=${enabledToggles(validation).join(",")}`,
    `disable-dawn-features=${DISABLED_TOGGLES.join(",")}`,
  ];
  if (adapterName) flags.push(`adapter=${adapterName}`);
  const instance = create(flags) as GPU;
  if (!adapterName) dawnInstances.set(validation, instance);
  return instance;
}

/** Opens the device. Throws NoAdapterError when there is no adapter at all. */
export async function openGpu(options: OpenGpuOptions = {}): Promise<Gpu> {
  const adapterName = options.adapterName ?? process.env.WEBFPM_ADAPTER;
  const validation = options.validation ?? process.env.WEBFPM_DAWN_VALIDATION === "1";
  let adapter: GPUAdapter | null = null;
  try {
    adapter = await dawn(adapterName, validation).requestAdapter({
      powerPreference: "high-performance",
    });
  } catch (err) {
    throw new NoAdapterError(String((err as Error).message ?? err));
  }
  if (!adapter) {
    throw new NoAdapterError(
      adapterName ? `none matches '${adapterName}'` : "Dawn's Vulkan backend found no driver",
    );
  }
  const offered = new Set<string>([...adapter.features] as string[]);
  const refused = new Set<string>();
  if (options.noF16) refused.add("shader-f16");
  if (options.noSubgroups) {
    refused.add("subgroups");
    refused.add("chromium-experimental-subgroup-matrix");
  }
  const noSubgroupMatrix = options.noSubgroupMatrix ??
    process.env.WEBFPM_NO_SUBGROUP_MATRIX === "1";
  if (noSubgroupMatrix) refused.add("chromium-experimental-subgroup-matrix");
  const requiredFeatures = WANTED_FEATURES.filter((f) => offered.has(f) && !refused.has(f));

  const requiredLimits: Record<string, number> = {};
  const adapterLimits = adapter.limits as unknown as Record<string, number>;
  for (const key in adapterLimits) {
    const value = adapterLimits[key];
    // Dawn trims the dynamic-offset limits itself and warns when they are asked for.
    if (typeof value === "number" && !key.startsWith("maxDynamic")) requiredLimits[key] = value;
  }
  const device = await adapter.requestDevice({
    requiredFeatures: requiredFeatures as GPUFeatureName[],
    requiredLimits,
  });
  device.addEventListener("uncapturederror", (event) => {
    const e = event as GPUUncapturedErrorEvent;
    console.error(`webgpu: uncaptured error: ${e.error.message}`);
  });

  const info = (device as unknown as { adapterInfo?: GPUAdapterInfo }).adapterInfo ?? adapter.info;
  const infoRecord = info as unknown as Record<string, unknown>;
  const features = new Set<string>([...device.features] as string[]);
  // Dawn lists subgroup-matrix configs on the adapter's info; the device's copy can be
  // empty, so take whichever has them.
  const configSources = [adapter.info, info].map((i) =>
    ((i as unknown as Record<string, unknown>).subgroupMatrixConfigs as
      | SubgroupMatrixConfig[]
      | undefined) ?? []
  );
  const rawConfigs = configSources.reduce((a, b) => (b.length > a.length ? b : a));
  const configs = features.has("chromium-experimental-subgroup-matrix")
    ? [...rawConfigs].map((c) => ({
      componentType: String(c.componentType),
      resultComponentType: String(c.resultComponentType),
      M: Number(c.M),
      N: Number(c.N),
      K: Number(c.K),
    }))
    : [];
  if (process.env.WEBFPM_DEBUG_ADAPTER) {
    console.error(
      "adapter.info:",
      adapter.info,
      "device.adapterInfo:",
      info,
      "configs:",
      rawConfigs,
    );
  }
  const limits: Record<string, number> = {};
  const deviceLimits = device.limits as unknown as Record<string, number>;
  for (const key in deviceLimits) {
    if (typeof deviceLimits[key] === "number") limits[key] = deviceLimits[key];
  }
  const str = (k: string) => String(infoRecord[k] ?? "");
  const gpu: Gpu = {
    device,
    adapter: {
      vendor: str("vendor"),
      architecture: str("architecture"),
      device: str("device"),
      description: str("description"),
      driver: driverOf(str("description")),
      backend: "vulkan",
      type: str("type") || (str("vendor") === "mesa" ? "cpu" : ""),
    },
    features,
    limits: Object.freeze(limits),
    f16: features.has("shader-f16"),
    subgroups: features.has("subgroups"),
    subgroupLanesConsecutive: features.has("subgroups") &&
      await subgroupLanesAreConsecutive(device),
    timestamps: features.has("timestamp-query"),
    subgroupMinSize: Number(infoRecord.subgroupMinSize ?? 0),
    subgroupMaxSize: Number(infoRecord.subgroupMaxSize ?? 0),
    subgroupMatrixConfigs: Object.freeze(configs),
    toggles: { enabled: enabledToggles(validation), disabled: DISABLED_TOGGLES },
    destroy: () => device.destroy(),
  };
  return Object.freeze(gpu);
}

function driverOf(description: string): string {
  // Dawn's Vulkan description reads like "NVIDIA: 580.159.4 580.159.4.0" or
  // "Mesa 25.0.7-2~bpo12+1 (LLVM 19.1.7)"; keep it whole, it is what users quote.
  return description;
}

/** True when a subgroup-matrix config with these types and shape is offered. */
export function hasSubgroupMatrix(
  gpu: Gpu,
  component: string,
  result: string,
  m: number,
  n: number,
  k: number,
): boolean {
  return gpu.subgroupMatrixConfigs.some((c) =>
    c.componentType === component && c.resultComponentType === result && c.M === m &&
    c.N === n && c.K === k
  );
}

/** A multi-line human description of the device: adapter, features, limits, configs. */
export function describeGpu(gpu: Gpu): string {
  const a = gpu.adapter;
  const lines = [
    `adapter: ${a.vendor} ${a.architecture} ${a.device} (${a.description}) [${a.backend}${
      a.type ? ", " + a.type : ""
    }]`,
    `features: ${[...gpu.features].filter((f) => WANTED_FEATURES.includes(f as never)).join(", ")}`,
    `subgroup size: ${gpu.subgroupMinSize}..${gpu.subgroupMaxSize}${
      gpu.subgroups
        ? (gpu.subgroupLanesConsecutive
          ? ", lanes consecutive"
          : ", lanes not consecutive (no lane-group kernels)")
        : ""
    }`,
    `subgroup matrix: ${
      gpu.subgroupMatrixConfigs.length === 0 ? "none" : gpu.subgroupMatrixConfigs
        .map((c) => `${c.componentType}->${c.resultComponentType} ${c.M}x${c.N}x${c.K}`)
        .join(", ")
    }`,
    `limits: maxBufferSize ${gpu.limits.maxBufferSize}, maxStorageBufferBindingSize ${gpu.limits.maxStorageBufferBindingSize}, ` +
    `maxComputeWorkgroupStorageSize ${gpu.limits.maxComputeWorkgroupStorageSize}, ` +
    `maxComputeInvocationsPerWorkgroup ${gpu.limits.maxComputeInvocationsPerWorkgroup}, ` +
    `maxStorageBuffersPerShaderStage ${gpu.limits.maxStorageBuffersPerShaderStage}`,
    `toggles: +${gpu.toggles.enabled.join(",")} -${gpu.toggles.disabled.join(",")}`,
  ];
  return lines.join("\n");
}
