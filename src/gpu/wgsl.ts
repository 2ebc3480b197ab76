/**
 * WGSL source assembly with a line map, and compilation that reports errors against the
 * original file and line (a generated prelude comes before every shader file).
 *
 * ```ts
 * const source = assembleWgsl([
 *   { file: "<prelude rmsnorm f16>", text: "enable f16;" },
 *   { file: "shaders/rmsnorm.wgsl", text: readShader("rmsnorm.wgsl") },
 * ]);
 * const module = await compileWgsl(device, source, "rmsnorm");
 * ```
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../util/project_root.ts";
import { paced } from "./event_pacing.ts";

/** A piece of WGSL and where it came from. */
export interface WgslSegment {
  readonly file: string;
  readonly text: string;
}

/** Assembled WGSL: the code and, per generated line, its origin. */
export interface WgslSource {
  readonly code: string;
  readonly origin: readonly { file: string; line: number }[];
}

/** The shaders/ folder of this checkout or bundle. */
export const SHADER_DIR = join(projectRoot(), "shaders") + "/";

const cache = new Map<string, string>();

/** Reads `shaders/<name>`, expanding `//#include "lib/x.wgsl"` lines once per shader. */
export function readShaderSegments(name: string, seen = new Set<string>()): WgslSegment[] {
  if (seen.has(name)) return [];
  seen.add(name);
  let text = cache.get(name);
  if (text === undefined) {
    try {
      text = readFileSync(SHADER_DIR + name, "utf8");
    } catch {
      throw new Error(`shader file not found: shaders/${name}`);
    }
    cache.set(name, text);
  }
  const out: WgslSegment[] = [];
  const lines = text.split("\n");
  let chunk: string[] = [];
  let chunkStart = 0;
  const flush = (next: number) => {
    if (chunk.length) {
      out.push({ file: `shaders/${name}:${chunkStart + 1}`, text: chunk.join("\n") });
    }
    chunk = [];
    chunkStart = next;
  };
  lines.forEach((line, i) => {
    const m = /^\s*\/\/#include\s+"([^"]+)"\s*$/.exec(line);
    if (m) {
      flush(i + 1);
      out.push(...readShaderSegments(m[1], seen));
    } else {
      chunk.push(line);
    }
  });
  flush(lines.length);
  return out;
}

/** Joins segments; `file` may carry a `:firstLine` suffix (see readShaderSegments). */
export function assembleWgsl(segments: readonly WgslSegment[]): WgslSource {
  const code: string[] = [];
  const origin: { file: string; line: number }[] = [];
  for (const seg of segments) {
    const m = /^(.*):(\d+)$/.exec(seg.file);
    const file = m ? m[1] : seg.file;
    const first = m ? Number(m[2]) : 1;
    seg.text.split("\n").forEach((line, i) => {
      code.push(line);
      origin.push({ file, line: first + i });
    });
  }
  return { code: code.join("\n"), origin };
}

/** A WGSL compile error naming the shader file, line and message. */
export class WgslCompileError extends Error {
  constructor(readonly label: string, readonly messages: string[]) {
    super(`WGSL compile error in ${label}:\n${messages.join("\n")}`);
    this.name = "WgslCompileError";
  }
}

/** Compiles WGSL; throws WgslCompileError with file:line:column for each error. */
export async function compileWgsl(
  device: GPUDevice,
  source: WgslSource,
  label: string,
): Promise<GPUShaderModule> {
  // The scope is popped before any await: modules compiled concurrently each get their own.
  // The wait is paced (event_pacing.ts): unpaced, Deno's pile of dawn.node's finalizers made
  // 204 variants take 15-18 s to compile one after another on lavapipe's host, 2.8 s paced.
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ code: source.code, label });
  const scope = device.popErrorScope();
  const [info, scopeError] = await paced(Promise.all([module.getCompilationInfo(), scope]));
  const errors = info.messages.filter((m) => m.type === "error");
  if (errors.length) {
    throw new WgslCompileError(
      label,
      errors.map((m) => {
        const where = source.origin[m.lineNum - 1];
        const place = where ? `${where.file}:${where.line}:${m.linePos}` : `line ${m.lineNum}`;
        return `  ${place}: ${m.message}`;
      }),
    );
  }
  if (scopeError) throw new WgslCompileError(label, [`  ${scopeError.message}`]);
  return module;
}
