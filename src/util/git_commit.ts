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

export function gitCommit(): string {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      cwd: new URL("../..", import.meta.url).pathname,
    }).trim();
  } catch {
    try {
      return JSON.parse(readFileSync(new URL("../../BUNDLE_INFO", import.meta.url), "utf8")).commit;
    } catch {
      return "unknown";
    }
  }
}
