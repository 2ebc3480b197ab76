/**
 * One GPU per rank on a host with several. Dawn's node binding picks the first adapter
 * whose name contains its `adapter=` option, so it cannot tell two GPUs of the same name
 * (two H200s both say "NVIDIA H200") apart. The Vulkan loader can: Mesa's device-select
 * layer (an implicit layer installed with mesa-vulkan-drivers, active for every Vulkan
 * driver, NVIDIA's included) reads `DRI_PRIME=pci-DDDD_BB_DD_F!` when the instance is
 * created, puts the GPU at that PCI address first and, with the `!`, hides every other
 * device. A rank sets it for its own GPU before the adapter is opened.
 *
 * `--dp-gpus`:
 * - `auto` (default): the host's GPUs from sysfs (PCI class 0x03, NVIDIA first, then AMD,
 *   then Intel), rank `localRank mod count`; ranks share the default adapter when the host
 *   has fewer than two, or when the layer is not installed.
 * - `shared`: every rank uses the default adapter.
 * - a list of PCI addresses (`0000:18:00.0,0000:2a:00.0`): local rank i takes the i-th.
 * A `DRI_PRIME` or `MESA_VK_DEVICE_SELECT` already in the environment wins.
 *
 * ```ts
 * const a = assignGpu({ mode: "auto", localRank: 1, env: process.env });
 * Object.assign(process.env, a.env); // before openGpu()
 * a.select; // "DRI_PRIME=pci-0000_2a_00_0!" or null (shared)
 * ```
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { RankIdentity } from "../../dp/mod.ts";

/** What {@link assignGpu} reads. */
export interface GpuAssignmentInputs {
  /** `auto`, `shared` or a comma-separated list of PCI addresses. */
  readonly mode: string;
  /** This rank's index among the ranks on its host. */
  readonly localRank: number;
  /** The environment (read only). */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Where sysfs is (default `/sys`). */
  readonly sysRoot?: string;
  /** Folders searched for Vulkan implicit layers (default: the loader's usual ones). */
  readonly layerDirs?: readonly string[];
}

/** How this rank's adapter is chosen. */
export interface GpuAssignment {
  /** Variables to set before the adapter is opened (empty: none). */
  readonly env: Readonly<Record<string, string>>;
  /** The selection as recorded in the artifact, or null (the default adapter, shared). */
  readonly select: string | null;
  /** One line for the log saying what was chosen and why. */
  readonly note: string;
}

/** Bad `--dp-gpus` input or a selection this host cannot make. */
export class GpuAssignmentError extends Error {
  /** `message` names the problem. */
  constructor(message: string) {
    super(message);
    this.name = "GpuAssignmentError";
  }
}

const VENDOR_ORDER = ["0x10de", "0x1002", "0x8086"]; // NVIDIA, AMD, Intel

/**
 * The GPUs of this host as PCI addresses (`0000:18:00.0`), in address order, from
 * `<sysRoot>/bus/pci/devices`: display-class devices (0x03....) of the first vendor in
 * NVIDIA, AMD, Intel order that has any (a server's BMC VGA is none of them).
 */
export function hostGpus(sysRoot = "/sys"): string[] {
  const dir = join(sysRoot, "bus", "pci", "devices");
  if (!existsSync(dir)) return [];
  const byVendor = new Map<string, string[]>();
  for (const address of readdirSync(dir).sort()) {
    const read = (name: string) => {
      try {
        return readFileSync(join(dir, address, name), "utf8").trim().toLowerCase();
      } catch {
        return "";
      }
    };
    if (!read("class").startsWith("0x03")) continue;
    const vendor = read("vendor");
    if (!VENDOR_ORDER.includes(vendor)) continue;
    byVendor.set(vendor, [...(byVendor.get(vendor) ?? []), address]);
  }
  for (const vendor of VENDOR_ORDER) {
    const found = byVendor.get(vendor);
    if (found) return found;
  }
  return [];
}

/** The folders the Vulkan loader reads implicit layers from. */
export function implicitLayerDirs(env: Readonly<Record<string, string | undefined>>): string[] {
  const split = (v: string | undefined) => (v ?? "").split(":").filter((s) => s !== "");
  const home = env.HOME ?? "";
  const config = [
    env.XDG_CONFIG_HOME ?? (home && join(home, ".config")),
    ...split(
      env.XDG_CONFIG_DIRS ?? "/etc/xdg",
    ),
    "/etc",
  ];
  const data = [
    env.XDG_DATA_HOME ?? (home && join(home, ".local/share")),
    ...split(
      env.XDG_DATA_DIRS ?? "/usr/local/share:/usr/share",
    ),
  ];
  return [
    ...split(env.VK_IMPLICIT_LAYER_PATH),
    ...split(env.VK_ADD_IMPLICIT_LAYER_PATH),
    ...[...config, ...data].filter((d) => d !== "").map((d) =>
      join(d, "vulkan", "implicit_layer.d")
    ),
  ];
}

/** Whether Mesa's device-select layer is installed (and not disabled by `NODEVICE_SELECT`). */
export function deviceSelectLayer(
  env: Readonly<Record<string, string | undefined>>,
  dirs: readonly string[] = implicitLayerDirs(env),
): string | null {
  if (env.NODEVICE_SELECT === "1") return null;
  for (const dir of dirs) {
    if (!existsSync(dir)) continue;
    const found = readdirSync(dir).find((f) => /device_select.*\.json$/i.test(f));
    if (found) return join(dir, found);
  }
  return null;
}

/** Normalizes a PCI address (`18:00.0` -> `0000:18:00.0`); throws on anything else. */
export function pciAddress(text: string): string {
  const m = /^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$/i.exec(text.trim());
  if (!m) {
    throw new GpuAssignmentError(
      `--dp-gpus: '${text}' is not a PCI address (DDDD:BB:DD.F, e.g. 0000:18:00.0)`,
    );
  }
  return `${(m[1] ?? "0000").toLowerCase()}:${m[2].toLowerCase()}:${m[3].toLowerCase()}.${m[4]}`;
}

/** The device-select layer's tag for a PCI address, exposing only that device. */
export function driPrimeTag(address: string): string {
  const [domain, bus, devFn] = pciAddress(address).split(":");
  const [dev, fn] = devFn.split(".");
  return `pci-${domain}_${bus}_${dev}_${fn}!`;
}

/**
 * This rank's index among the ranks on its host: `SLURM_LOCALID` under Slurm,
 * `OMPI_COMM_WORLD_LOCAL_RANK` / `MPI_LOCALRANKID` under MPI, else `WEBFPM_DP_LOCAL_RANK`
 * or the rank itself (every rank on one host, as `--dp N` starts them).
 */
export function localRankOf(
  identity: RankIdentity,
  env: Readonly<Record<string, string | undefined>>,
): number {
  const names = identity.source === "slurm"
    ? ["SLURM_LOCALID"]
    : identity.source === "mpi"
    ? ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"]
    : ["WEBFPM_DP_LOCAL_RANK"];
  for (const name of names) {
    const v = env[name]?.trim();
    if (v !== undefined && /^\d+$/.test(v)) return Number(v);
  }
  return identity.rank;
}

/** Chooses this rank's adapter (see the module doc above). */
export function assignGpu(i: GpuAssignmentInputs): GpuAssignment {
  const shared = (why: string): GpuAssignment => ({
    env: {},
    select: null,
    note: `gpu: the default adapter, shared with the other ranks on this host (${why})`,
  });
  for (const name of ["DRI_PRIME", "MESA_VK_DEVICE_SELECT"]) {
    const v = i.env[name];
    if (v !== undefined && v.trim() !== "") {
      return { env: {}, select: `${name}=${v}`, note: `gpu: ${name}=${v} from the environment` };
    }
  }
  const mode = i.mode.trim();
  if (mode === "shared") return shared("--dp-gpus shared");
  const layer = deviceSelectLayer(i.env, i.layerDirs);
  if (mode === "auto") {
    const gpus = hostGpus(i.sysRoot);
    if (gpus.length < 2) return shared(`${gpus.length} GPU(s) on this host`);
    if (layer === null) {
      return shared(
        `${gpus.length} GPUs, but Mesa's device-select Vulkan layer is not installed ` +
          "(mesa-vulkan-drivers) or NODEVICE_SELECT=1, and Dawn alone cannot tell " +
          "adapters of one name apart",
      );
    }
    const address = gpus[i.localRank % gpus.length];
    const tag = driPrimeTag(address);
    const sharing = i.localRank >= gpus.length ? `; more local ranks than GPUs` : "";
    return {
      env: { DRI_PRIME: tag },
      select: `DRI_PRIME=${tag}`,
      note: `gpu: local rank ${i.localRank} -> ${address} of ${gpus.length} GPUs ` +
        `(DRI_PRIME=${tag}, via ${layer})${sharing}`,
    };
  }
  const list = mode.split(",").map(pciAddress);
  if (i.localRank >= list.length) {
    throw new GpuAssignmentError(
      `--dp-gpus lists ${list.length} GPU(s) but local rank ${i.localRank} needs one more`,
    );
  }
  if (layer === null) {
    throw new GpuAssignmentError(
      "--dp-gpus names PCI addresses, but Mesa's device-select Vulkan layer is not installed " +
        "(install mesa-vulkan-drivers) or NODEVICE_SELECT=1: Dawn cannot select an adapter by address",
    );
  }
  const tag = driPrimeTag(list[i.localRank]);
  return {
    env: { DRI_PRIME: tag },
    select: `DRI_PRIME=${tag}`,
    note: `gpu: local rank ${i.localRank} -> ${list[i.localRank]} (DRI_PRIME=${tag}, via ${layer})`,
  };
}
