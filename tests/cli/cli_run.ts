/**
 * Runs a deno task's entry point as a subprocess (the way a user runs it) and returns its
 * exit code and output.
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import process from "node:process";

/** The repository root. */
export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Runs `src/cli/<name>.ts` with `args`; INIT_CWD is the repository root. */
export function runTask(
  name: string,
  args: readonly string[],
): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(
    `${ROOT}node_modules/.bin/deno`,
    ["run", "-A", `src/cli/${name}.ts`, ...args],
    {
      cwd: ROOT,
      encoding: "utf8",
      env: { ...process.env, INIT_CWD: ROOT },
      maxBuffer: 64 * 2 ** 20,
    },
  );
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}
