/**
 * The test command's runner: loads every `tests/**\/*_test.ts` suite into uvu's queue,
 * runs them, and ends with the one line CI reads: `N passed, N failed[, N skipped]`.
 *
 * Usage: `deno task test [substring...]` runs only the suite files whose path contains
 * one of the substrings.
 */
import { readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import process from "node:process";

type SuiteResult = [errors: string | true, ran: number, skipped: number, total: number];
type QueuedSuite = () => Promise<SuiteResult>;

const root = new URL("..", import.meta.url).pathname;

function findSuites(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...findSuites(path));
    else if (name.endsWith("_test.ts")) out.push(path);
  }
  return out;
}

const filters = process.argv.slice(2);
const files = findSuites(join(root, "tests")).filter((f) =>
  filters.length === 0 || filters.some((s) => relative(root, f).includes(s))
);

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
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`);
process.exit(failed > 0 || files.length === 0 ? 1 : 0);
