/**
 * probe-sgmat as a user runs it: on an adapter without f16 subgroup matrices (lavapipe) it
 * says so and exits 0; where they exist it reports the several-subgroup check and a line per
 * timed primitive. Bad options are usage errors.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { hasSubgroupMatrix } from "../../src/gpu/device.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { runTask } from "./cli_run.ts";

test("probe-sgmat reports the primitives, or that this adapter has no subgroup matrices", async () => {
  const gpu = await sharedGpu();
  const r = runTask("probe_sgmat", ["--iters", "64", "--sms", "2", "--per-sm", "2"]);
  assert.is(r.code, 0, r.stderr);
  if (hasSubgroupMatrix(gpu, "f16", "f32", 16, 16, 16) && gpu.subgroupMaxSize === 32) {
    assert.match(
      r.stdout,
      /several subgroups, check off: compiles; 4 subgroups' products, max \|error\| 0/,
    );
    for (const name of ["mma8", "mma1", "wgload", "gload", "sts16", "barrier"]) {
      assert.match(r.stdout, new RegExp(`^${name} +[\\d.]+ an SM +[\\d.]+ alone`, "m"), name);
    }
  } else {
    assert.match(r.stdout, /no f16 16x16x16 subgroup matrices on 32-wide subgroups/);
  }
});

test("probe-sgmat refuses a bad option", () => {
  const r = runTask("probe_sgmat", ["--iters", "3"]);
  assert.is(r.code, 2);
  assert.match(r.stderr, /iters/);
});

test.run();
