/**
 * The test command's runner: loads every `tests/**\/*_test.ts` suite into uvu's queue,
 * runs them, and ends with the one line CI reads: `N passed, N failed[, N skipped]`.
 *
 * Usage: `deno task test [substring...]` runs only the suite files whose path contains
 * one of the substrings.
 *
 * The suites in ISOLATED run in a process of their own, after the others: the emulated
 * tensor-core kernels run a few seconds each in a fresh process, but inside the one that had
 * run every other suite first they sometimes took 10-15 minutes a form (the main thread in
 * Deno's own code and memmove, the cause not found).
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import process from "node:process";

type SuiteResult = [errors: string | true, ran: number, skipped: number, total: number];
type QueuedSuite = () => Promise<SuiteResult>;

const root = new URL("..", import.meta.url).pathname;

// The suites' benches keep their token caches (src/bench/token_cache.ts) in a folder of their
// own, not in the checkout's .cache: a run starts from none and leaves none behind there.
if (!process.env.WEBFPM_CACHE_DIR) {
  process.env.WEBFPM_CACHE_DIR = mkdtempSync(join(tmpdir(), "webfpm-test-tokens-"));
}

// Dawn's validation is on for the suites (and the CLI processes they start): a misuse of the
// WebGPU API drops its command buffer, so the test that made it fails, where under
// skip_validation (webfpm's default) it could pass unnoticed; session 40 found three that way.
// WEBFPM_DAWN_VALIDATION=0 turns it off. The isolated suite runs without it (below).
process.env.WEBFPM_DAWN_VALIDATION ??= "1";

function findSuites(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...findSuites(path));
    else if (name.endsWith("_test.ts")) out.push(path);
  }
  return out;
}

/** Suite files that run in their own process (see the module doc). */
const ISOLATED = ["tests/kernels/tensor_cores_emulated_test.ts"];

const filters = process.argv.slice(2);
const chosen = findSuites(join(root, "tests")).filter((f) =>
  filters.length === 0 || filters.some((s) => relative(root, f).includes(s))
);
const files = chosen.filter((f) => !ISOLATED.includes(relative(root, f)));
const isolated = chosen.filter((f) => ISOLATED.includes(relative(root, f)));

const g = globalThis as unknown as {
  UVU_DEFER: number;
  UVU_INDEX: number;
  UVU_QUEUE: unknown[][];
};
g.UVU_DEFER = 1;
g.UVU_QUEUE = [];
const uvu = await import("uvu");

let passed = 0, failed = 0, skipped = 0;
let loadFailures = 0;
for (const [index, file] of files.entries()) {
  g.UVU_INDEX = index;
  g.UVU_QUEUE.push([relative(root, file)]);
  try {
    await import("file://" + file);
  } catch (err) {
    loadFailures++;
    console.error(
      `\n  could not load ${relative(root, file)}:\n  ${(err as Error).stack ?? err}\n`,
    );
  }
}

for (const group of g.UVU_QUEUE) {
  for (let i = 1; i < group.length; i++) {
    const run = group[i] as QueuedSuite;
    group[i] = async () => {
      const result = await run();
      const [, ran, skip, total] = result;
      passed += ran;
      failed += total - ran;
      skipped += skip;
      return result;
    };
  }
}

await uvu.exec(false);
failed += loadFailures;
for (const file of isolated) {
  const r = runIsolated(file);
  passed += r.passed;
  failed += r.failed;
  skipped += r.skipped;
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`);
process.exit(failed > 0 || chosen.length === 0 ? 1 : 0);

/**
 * Runs one suite file in a child `deno run -A` (its output goes straight through) and reads
 * its counts from uvu's summary; a child that ends without one counts as one failure.
 */
function runIsolated(file: string): { passed: number; failed: number; skipped: number } {
  console.log(`\n${relative(root, file)} (in a process of its own)`);
  const r = spawnSync(process.execPath, ["run", "-A", file], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    // plain text: the summary is read below; Dawn's validation as webfpm runs (its forms'
    // cost is compiling their emulated shaders, and they have not been run under validation)
    env: { ...process.env, NO_COLOR: "1", WEBFPM_DAWN_VALIDATION: "0" },
    maxBuffer: 64 * 2 ** 20,
  });
  const out = r.stdout ?? "";
  process.stdout.write(out);
  // uvu's summary
  const count = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(out)?.[1]);
  const total = count("Total"), ran = count("Passed"), skip = count("Skipped") || 0;
  if (!Number.isInteger(total) || !Number.isInteger(ran)) {
    console.error(`  ${relative(root, file)}: no uvu summary (exit ${r.status})`);
    return { passed: 0, failed: 1, skipped: 0 };
  }
  // a child that failed no test but exited non-zero still counts as one failure
  const failedTests = total - ran;
  return { passed: ran, failed: failedTests || (r.status === 0 ? 0 : 1), skipped: skip };
}
