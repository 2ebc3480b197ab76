/**
 * The commit results were produced by: `git rev-parse` in a checkout, else the commit the
 * offline bundle recorded when it was built, else "unknown".
 *
 * ```ts
 * gitCommit(); // "1c4f5b9"
 * ```
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "./project_root.ts";

export function gitCommit(): string {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      cwd: projectRoot(),
    }).trim();
  } catch {
    try {
      return JSON.parse(readFileSync(join(projectRoot(), "BUNDLE_INFO"), "utf8")).commit;
    } catch {
      return "unknown";
    }
  }
}
