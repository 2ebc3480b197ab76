/**
 * The one device the test process shares. A missing adapter fails the suite (CI runs on
 * the software Vulkan driver; no adapter there is a broken set-up, never a skip).
 */
import { type Gpu, openGpu } from "../src/gpu/device.ts";

let opened: Promise<Gpu> | undefined;

/** Opens the device on first use. */
export function sharedGpu(): Promise<Gpu> {
  opened ??= openGpu();
  return opened;
}
