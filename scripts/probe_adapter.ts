/**
 * Prints the adapter Dawn opens (exit 0) or why none opens (exit 2); scripts/setup uses it
 * to decide whether the software Vulkan driver is needed.
 */
import { openGpu } from "../src/gpu/device.ts";
import { runCli } from "../src/cli/run_cli.ts";

await runCli(async () => {
  const gpu = await openGpu();
  console.log(`${gpu.adapter.description} (${gpu.adapter.vendor}, ${gpu.adapter.type || "gpu"})`);
  gpu.destroy();
  return 0;
});
