/**
 * `deno task node-build`: the same TypeScript for Node. Bundles every task's entry point
 * (src/cli/*.ts named in deno.json) into `dist/node/<task>.mjs`, with the npm packages left
 * as imports (Node resolves them from node_modules, native addons included), so
 *   node dist/node/validate.mjs --kernel rmsnorm
 * runs the same code as `deno task validate --kernel rmsnorm`. Node 20 cannot run .ts files.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import process from "node:process";
import { parseArgs, UsageError } from "../src/cli/args.ts";
import { runCli } from "../src/cli/run_cli.ts";

const ROOT = join(dirname(new URL(import.meta.url).pathname), "..");

/** Task name -> entry file, for tasks that run a src/cli entry point. */
export function cliEntries(): Map<string, string> {
  const tasks = JSON.parse(readFileSync(join(ROOT, "deno.json"), "utf8")).tasks as Record<
    string,
    string
  >;
  const out = new Map<string, string>();
  for (const [name, command] of Object.entries(tasks)) {
    const m = /\s(src\/cli\/[\w]+\.ts)\b/.exec(command);
    if (m) out.set(name, m[1]);
  }
  return out;
}

await runCli(() => {
  const opts = parseArgs("node-build", "Bundles the task entry points for Node.", {
    task: { type: "list", help: "only these tasks (default: every src/cli task)" },
  }, process.argv.slice(2));
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  const externals = Object.keys(pkg.dependencies ?? {}).flatMap((p) => ["--external", p]);
  const entries = cliEntries();
  const unknown = (opts.task ?? []).filter((t) => !entries.has(t));
  if (unknown.length > 0) {
    throw new UsageError(
      `--task: no src/cli task ${unknown.join(", ")} (known: ${[...entries.keys()].join(", ")})`,
    );
  }
  const outDir = join(ROOT, "dist", "node");
  mkdirSync(outDir, { recursive: true });
  for (const [task, entry] of entries) {
    if (opts.task && !opts.task.includes(task)) continue;
    const out = join(outDir, `${task}.mjs`);
    execFileSync(process.execPath, [
      "bundle",
      "--quiet",
      "--format",
      "esm",
      ...externals,
      "-o",
      out,
      join(ROOT, entry),
    ], { stdio: "inherit" });
    console.log(`node-build: ${task} -> dist/node/${task}.mjs`);
  }
  return 0;
});
