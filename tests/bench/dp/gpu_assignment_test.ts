/**
 * GPU per rank: which adapter each rank takes, from a sysfs tree and the Vulkan layer
 * folders (built in a temporary folder the way a host lays them out), and, on this
 * machine's real Dawn, that two adapters of the same name are both listed and that the
 * selection a rank makes leaves Dawn exactly one of them.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  assignGpu,
  deviceSelectLayer,
  driPrimeTag,
  GpuAssignmentError,
  hostGpus,
  localRankOf,
  pciAddress,
} from "../../../src/bench/dp/gpu_assignment.ts";

const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

/** A host: its PCI devices as [address, class, vendor], and whether the layer is installed. */
function host(devices: [string, string, string][], layer: boolean) {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-gpus-"));
  for (const [address, cls, vendor] of devices) {
    const d = join(dir, "sys", "bus", "pci", "devices", address);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, "class"), `${cls}\n`);
    writeFileSync(join(d, "vendor"), `${vendor}\n`);
  }
  const layers = join(dir, "implicit_layer.d");
  mkdirSync(layers);
  if (layer) writeFileSync(join(layers, "VkLayer_MESA_device_select.json"), "{}");
  return { sysRoot: join(dir, "sys"), layerDirs: [layers] };
}

const H200_HOST: [string, string, string][] = [
  ["0000:03:00.0", "0x030000", "0x1a03"], // the BMC's VGA (ASPEED): not a GPU
  ["0000:2a:00.0", "0x030200", "0x10de"],
  ["0000:18:00.0", "0x030200", "0x10de"],
  ["0000:00:1f.0", "0x060100", "0x8086"], // an ISA bridge
];

test("hostGpus: the display-class devices of NVIDIA (then AMD, then Intel), in address order", () => {
  assert.equal(hostGpus(host(H200_HOST, true).sysRoot), ["0000:18:00.0", "0000:2a:00.0"]);
  assert.equal(
    hostGpus(host([["0000:00:02.0", "0x030000", "0x8086"]], true).sysRoot),
    ["0000:00:02.0"],
  );
  assert.equal(hostGpus(join(tmpdir(), "no-such-sysfs")), []);
});

test("auto: local rank r takes the r-th GPU through the device-select layer's PCI tag", () => {
  const h = host(H200_HOST, true);
  const a0 = assignGpu({ mode: "auto", localRank: 0, env: {}, ...h });
  const a1 = assignGpu({ mode: "auto", localRank: 1, env: {}, ...h });
  assert.equal(a0.env, { DRI_PRIME: "pci-0000_18_00_0!" });
  assert.equal(a1.env, { DRI_PRIME: "pci-0000_2a_00_0!" });
  assert.is(a1.select, "DRI_PRIME=pci-0000_2a_00_0!");
  assert.match(a1.note, /local rank 1 -> 0000:2a:00.0 of 2 GPUs/);
  const a2 = assignGpu({ mode: "auto", localRank: 2, env: {}, ...h });
  assert.equal(a2.env, { DRI_PRIME: "pci-0000_18_00_0!" });
  assert.match(a2.note, /more local ranks than GPUs/);
});

test("auto shares the default adapter with one GPU, or without the layer, and says why", () => {
  const one = assignGpu({
    mode: "auto",
    localRank: 1,
    env: {},
    ...host([["0000:18:00.0", "0x030200", "0x10de"]], true),
  });
  assert.equal([one.env, one.select], [{}, null]);
  assert.match(one.note, /shared .*1 GPU\(s\) on this host/);
  const noLayer = assignGpu({ mode: "auto", localRank: 1, env: {}, ...host(H200_HOST, false) });
  assert.equal([noLayer.env, noLayer.select], [{}, null]);
  assert.match(noLayer.note, /device-select Vulkan layer is not installed/);
  const disabled = assignGpu({
    mode: "auto",
    localRank: 1,
    env: { NODEVICE_SELECT: "1" },
    ...host(H200_HOST, true),
  });
  assert.is(disabled.select, null);
});

test("an explicit list of PCI addresses, shared, and the environment's own choice", () => {
  const h = host(H200_HOST, true);
  const listed = assignGpu({ mode: "2a:00.0,0000:18:00.0", localRank: 0, env: {}, ...h });
  assert.equal(listed.env, { DRI_PRIME: "pci-0000_2a_00_0!" });
  assert.equal(assignGpu({ mode: "shared", localRank: 1, env: {}, ...h }).select, null);
  const own = assignGpu({
    mode: "auto",
    localRank: 1,
    env: { DRI_PRIME: "pci-0000_18_00_0!" },
    ...h,
  });
  assert.equal([own.env, own.select], [{}, "DRI_PRIME=pci-0000_18_00_0!"]);
  assert.throws(
    () => assignGpu({ mode: "0000:18:00.0", localRank: 1, env: {}, ...h }),
    (e: Error) =>
      e instanceof GpuAssignmentError && /lists 1 GPU\(s\) but local rank 1/.test(e.message),
  );
  assert.throws(
    () => assignGpu({ mode: "gpu1", localRank: 0, env: {}, ...h }),
    /'gpu1' is not a PCI address/,
  );
  assert.throws(
    () => assignGpu({ mode: "0000:18:00.0", localRank: 0, env: {}, ...host(H200_HOST, false) }),
    /device-select Vulkan layer is not installed/,
  );
});

test("PCI addresses and tags; the local rank from Slurm, MPI or the rank", () => {
  assert.is(pciAddress("18:00.0"), "0000:18:00.0");
  assert.is(pciAddress("0001:AB:1F.7"), "0001:ab:1f.7");
  assert.is(driPrimeTag("0000:2a:00.0"), "pci-0000_2a_00_0!");
  const id = (source: "flags" | "slurm" | "mpi", rank: number) => ({
    rank,
    size: 8,
    masterHost: "h",
    masterPort: 1,
    source,
  });
  assert.is(localRankOf(id("slurm", 5), { SLURM_LOCALID: "1" }), 1);
  assert.is(localRankOf(id("mpi", 5), { OMPI_COMM_WORLD_LOCAL_RANK: "3" }), 3);
  assert.is(localRankOf(id("flags", 5), {}), 5);
  assert.is(localRankOf(id("flags", 5), { WEBFPM_DP_LOCAL_RANK: "0" }), 0);
});

/** The adapters Dawn lists in a fresh process with `env` (it lists them when none matches). */
function dawnAdapters(env: Record<string, string>): string[] {
  const script = [
    `import { create } from "webgpu";`,
    `try { await create(["backend=vulkan", "adapter=no-such-adapter"]).requestAdapter(); }`,
    `catch (e) { console.log(String(e.message ?? e)); }`,
  ].join("\n");
  const r = spawnSync(process.execPath.includes("deno") ? process.execPath : "node", [
    ...(process.execPath.includes("deno") ? ["eval", "--ext=js"] : ["--input-type=module", "-e"]),
    script,
  ], { cwd: ROOT, encoding: "utf8", env: { ...process.env, ...env } });
  return [...r.stdout.matchAll(/\* backend: 'vulkan', name: '([^']*)'/g)].map((m) => m[1]);
}

test("on this machine's Dawn: two same-named adapters, and the rank's selection leaves one", () => {
  const lvp = "/usr/share/vulkan/icd.d/lvp_icd.json";
  if (!existsSync(lvp)) {
    assert.unreachable("lavapipe's ICD is missing: run sudo scripts/setup");
  }
  // Two copies of lavapipe's driver: two adapters with one name, like two H200s.
  const dir = mkdtempSync(join(tmpdir(), "webfpm-icds-"));
  copyFileSync(lvp, join(dir, "a.json"));
  copyFileSync(lvp, join(dir, "b.json"));
  const twoIcds = { VK_DRIVER_FILES: `${join(dir, "a.json")}:${join(dir, "b.json")}` };
  const both = dawnAdapters(twoIcds);
  assert.is(both.length, 2, `Dawn lists both adapters: ${both}`);
  assert.is(both[0], both[1], "with the same name, so adapter=NAME cannot tell them apart");
  const layer = deviceSelectLayer(process.env);
  if (layer === null) {
    const a = assignGpu({ mode: "shared", localRank: 1, env: process.env });
    assert.is(a.select, null);
    return;
  }
  // lavapipe has no PCI bus info, so its address reads as 0000:00:00.0 to the layer.
  const picked = dawnAdapters({ ...twoIcds, DRI_PRIME: driPrimeTag("0000:00:00.0") });
  assert.is(picked.length, 1, `the layer (${layer}) leaves Dawn one adapter: ${picked}`);
});

test.run();
