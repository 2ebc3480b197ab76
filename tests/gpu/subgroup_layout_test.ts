/**
 * The subgroup layout probe: lavapipe lays subgroups out as runs of consecutive invocations,
 * and a device that does not is refused the lane-group (decode) kernels with a reason.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { sharedGpu } from "../shared_gpu.ts";
import { subgroupLanesAreConsecutive } from "../../src/gpu/subgroup_layout.ts";
import { unsupportedReason, variantByName } from "../../kernels/kernel.ts";
import { spec as gemv } from "../../kernels/gemv.ts";
import type { Gpu } from "../../src/gpu/device.ts";

test("lavapipe's subgroups are consecutive invocations, and openGpu says so", async () => {
  const gpu = await sharedGpu();
  assert.ok(gpu.subgroups, "lavapipe offers subgroups");
  assert.is(await subgroupLanesAreConsecutive(gpu.device), true);
  assert.is(gpu.subgroupLanesConsecutive, true);
  assert.is(unsupportedReason(gpu, variantByName(gemv, "f32-dec")), null);
});

test("without consecutive lanes the forms that index by subgroup are refused, the others are not", async () => {
  const gpu = await sharedGpu();
  const other = { ...gpu, subgroupLanesConsecutive: false } as Gpu;
  // the lane groups, and the subgroup reduction whose subgroups are a row's runs of lanes
  for (const form of ["f32-dec", "f16-sg"]) {
    assert.match(unsupportedReason(other, variantByName(gemv, form)) ?? "", /consecutive/, form);
  }
  assert.is(unsupportedReason(other, variantByName(gemv, "f32")), null);
});

test.run();
