/**
 * The folder that holds webfpm's deno.json and shaders/: a checkout, an unpacked offline
 * bundle, or (for Node) the checkout above dist/node/. Found by walking up from this
 * module, so bundled and unbundled code agree.
 *
 * ```ts
 * join(projectRoot(), "shaders", "rmsnorm.wgsl");
 * ```
 */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

let cached: string | undefined;

export function projectRoot(): string {
  if (cached) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, "deno.json")) && existsSync(join(dir, "shaders"))) {
      return cached = dir;
    }
    const up = dirname(dir);
    if (up === dir) {
      throw new Error(`webfpm: no deno.json with shaders/ above ${fileURLToPath(import.meta.url)}`);
    }
    dir = up;
  }
}
