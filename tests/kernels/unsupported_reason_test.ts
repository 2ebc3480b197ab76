import { test } from "uvu";
import * as assert from "uvu/assert";
import type { Gpu } from "../../src/gpu/device.ts";
import { unsupportedReason, variantByName } from "../../kernels/kernel.ts";
import { moeRouterFusedVariant, spec } from "../../kernels/moe_router_fused.ts";
import { moeCombineNormVariant } from "../../kernels/moe_combine_norm.ts";

/** A device of these limits, with shader-f16 and no subgroups. */
function device(invocations: number, workgroupBytes: number): Gpu {
  return {
    f16: true,
    subgroups: false,
    limits: {
      maxComputeInvocationsPerWorkgroup: invocations,
      maxComputeWorkgroupStorageSize: workgroupBytes,
    },
  } as unknown as Gpu;
}

test("a variant past the device's invocations or workgroup memory is refused, naming the limit", () => {
  const wide = variantByName(spec, "f16-wg1024");
  const narrow = variantByName(spec, "f16");
  assert.is(unsupportedReason(device(1024, 49152), wide), null);
  assert.is(
    unsupportedReason(device(256, 49152), wide),
    "workgroups of 1024 invocations (this device takes 256)",
  );
  // WebGPU's default 16 KiB: neither form's x row and scratch fit
  assert.is(
    unsupportedReason(device(1024, 16384), narrow),
    "21568 bytes of workgroup memory (this device takes 16384)",
  );
  // lavapipe's 32 KiB holds both; the H200's 48 KiB too
  assert.is(unsupportedReason(device(1024, 32768), wide), null);
  // the router picks the widest form that runs
  assert.is(moeRouterFusedVariant(device(1024, 32768)).name, "f16-wg1024");
  assert.is(moeRouterFusedVariant(device(256, 32768)).name, "f16");
});

test("the combine with the norm takes 512 invocations where they run, else its form of 256", () => {
  assert.is(moeCombineNormVariant(device(1024, 32768), "f16"), "f16");
  assert.is(moeCombineNormVariant(device(256, 32768), "f16"), "f16-wg256");
  assert.is(moeCombineNormVariant(device(256, 32768), "f32"), "f32");
});

test.run();
