/**
 * Imports flow down: src/kv and src/engine import nothing from src/gpu, src/model (but
 * the plain type file src/model/step_batch.ts), kernels/ or shaders/; kv never imports
 * engine; neither uses Deno-only APIs.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const root = resolve(dirname(new URL(import.meta.url).pathname), "../..");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sourceFiles(path) : path.endsWith(".ts") ? [path] : [];
  });
}

/** Every module specifier a file imports or re-exports (static and dynamic). */
function specifiers(source: string): string[] {
  const out: string[] = [];
  const re =
    /(?:^|[^\w$.])(?:import|export)\s[^;]*?from\s*["']([^"']+)["']|import\s*\(\s*["']([^"']+)["']\s*\)|^\s*import\s*["']([^"']+)["']/gm;
  for (const m of source.matchAll(re)) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}

/** Why `file` may not import `spec`, or null when it may. */
function violation(file: string, spec: string): string | null {
  if (spec.startsWith("node:")) return null;
  if (!spec.startsWith(".")) return `imports package "${spec}"`;
  const target = relative(root, resolve(dirname(file), spec));
  const area = relative(root, file).split("/")[1];
  if (target === "src/model/step_batch.ts") return null;
  for (
    const banned of ["src/gpu/", "src/model/", "kernels/", "shaders/", "src/bench/", "src/cli/"]
  ) {
    if (target.startsWith(banned)) return `imports ${target}`;
  }
  if (area === "kv" && !target.startsWith("src/kv/")) return `kv imports ${target}`;
  if (area === "engine" && !/^src\/(engine|kv|util)\//.test(target)) return `imports ${target}`;
  return null;
}

test("the checker sees static, type, re-export and dynamic imports, and flags the banned ones", () => {
  const src = [
    `import { a } from "./a.ts";`,
    `import type { B } from "../model/config.ts";`,
    `export { c } from "../gpu/device.ts";`,
    `const k = await import("../../kernels/x.ts");`,
    `import "webgpu";`,
  ].join("\n");
  const file = join(root, "src/engine/x.ts");
  assert.equal(specifiers(src), [
    "./a.ts",
    "../model/config.ts",
    "../gpu/device.ts",
    "../../kernels/x.ts",
    "webgpu",
  ]);
  assert.equal(specifiers(src).map((s) => violation(file, s)), [
    null,
    "imports src/model/config.ts",
    "imports src/gpu/device.ts",
    "imports kernels/x.ts",
    `imports package "webgpu"`,
  ]);
  assert.is(violation(file, "../model/step_batch.ts"), null);
  assert.is(
    violation(join(root, "src/kv/y.ts"), "../engine/request.ts"),
    "kv imports src/engine/request.ts",
  );
});

test("src/kv and src/engine import only downward, and use no Deno-only API", () => {
  const files = [...sourceFiles(join(root, "src/kv")), ...sourceFiles(join(root, "src/engine"))];
  assert.ok(files.length >= 15, "found the sources");
  const problems: string[] = [];
  for (const file of files) {
    const source = readFileSync(file, "utf8");
    for (const spec of specifiers(source)) {
      const why = violation(file, spec);
      if (why) problems.push(`${relative(root, file)}: ${why}`);
    }
    if (/\bDeno\./.test(source)) problems.push(`${relative(root, file)}: uses Deno.*`);
  }
  assert.equal(problems, []);
});

test.run();
