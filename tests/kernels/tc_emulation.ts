/**
 * A text transform that lets a one-subgroup tensor-core shader run where subgroup matrices do
 * not (lavapipe): every 16 x 16 subgroup-matrix type, load, store and product, and
 * `subgroupShuffleXor`, become workgroup-memory and private-array code with the same meaning
 * for subgroups of 32 consecutive invocations (one a workgroup, or several each with its own
 * matrices). A left or right matrix is held whole by every invocation (f32 of the f16 values); a
 * result matrix is spread over its subgroup as 8 consecutive elements an invocation. The arithmetic is the tensor cores': f16 operands, f32 sums. So a shader's logic
 * (addressing, masking, softmax, barriers) is checked on any adapter; its matrix instructions
 * themselves are checked only by `validate` on a GPU that has them.
 *
 * ```ts
 * const wgsl = emulateSubgroupMatrices(readFileSync("shaders/x.wgsl", "utf8"));
 * const { variant, remove } = emulatedVariant(spec, variantByName(spec, "f16-tcs16"));
 * ```
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import type { KernelSpec, Variant } from "../../kernels/kernel.ts";
import type { ParamFields } from "../../kernels/params.ts";
import { readShaderSegments, SHADER_DIR } from "../../src/gpu/wgsl.ts";

/**
 * `real` with its shader (includes expanded first, so a library's matrix operations are
 * emulated with the shader's) emulated into a temporary file, its consts overridden by
 * `consts`, named `<name>-emulated`; `remove` deletes the file.
 */
export function emulatedVariant<F extends ParamFields>(
  spec: KernelSpec<F>,
  real: Variant,
  consts?: Readonly<Record<string, number>>,
): { variant: Variant; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "webfpm-emulated-"));
  const shader = real.shader ?? spec.shader;
  const file = join(dir, shader);
  const text = readShaderSegments(shader).map((seg) => seg.text).join("\n");
  writeFileSync(file, emulateSubgroupMatrices(text));
  return {
    variant: {
      ...real,
      name: `${real.name}-emulated`,
      subgroupMatrix: undefined,
      perSubgroupMatrices: undefined,
      shader: relative(SHADER_DIR, file),
      consts: { ...real.consts, ...consts },
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** The emulated shader of `src` (throws naming what it cannot emulate). */
export function emulateSubgroupMatrices(src: string): string {
  let t = src;
  const loads = new Map<string, "f" | "r">();
  t = t.replace(
    /subgroupMatrixLoad<subgroup_matrix_(left|right|result)<f\d\d, 16, 16>, (row_major|col_major)>\(&(wg\.)?(\w+), /g,
    (_m, kind: string, major: string, wg: string | undefined, arr: string) => {
      const k = kind === "result" ? "r" : "f";
      const source = `${wg ?? ""}${arr}`;
      loads.set(source, k);
      return `emu_load_${arr}_${k}(${major === "col_major" ? 1 : 0}u, `;
    },
  );
  const stores = new Set<string>();
  t = t.replace(/subgroupMatrixStore<row_major>\(&(wg\.)?(\w+), /g, (_m, wg, arr: string) => {
    stores.add(`${wg ?? ""}${arr}`);
    return `emu_store_${arr}(`;
  });
  t = t.replace(/subgroupMatrixMultiplyAccumulate\(/g, "emu_mma(");
  t = t.replace(/subgroup_matrix_result<f32, 16, 16>/g, "EmuR");
  t = t.replace(/subgroup_matrix_(left|right)<f16, 16, 16>/g, "EmuF");
  const shuffles = /subgroupShuffleXor\(/.test(t);
  t = t.replace(/subgroupShuffleXor\(/g, "emu_xor_f32(");
  const mainHead = /@builtin\(local_invocation_index\) lid: u32,\n\) \{\n/;
  if (!mainHead.test(t)) throw new Error("emulation: main() takes no local_invocation_index lid");
  t = t.replace(mainHead, (m) => m + "  emu_lid = lid % 32u;\n  emu_wlid = lid;\n");
  const left = /\bsubgroup\w*/.exec(t.replace(/\/\/.*$/gm, ""));
  if (left) throw new Error(`emulation: ${left[0]} is not emulated`);

  const lines = [
    "struct EmuF { e: array<f32, 256> }",
    "struct EmuR { e: array<f32, 8> }",
    // the invocation's lane in its subgroup, and its index in the workgroup
    "var<private> emu_lid: u32;",
    "var<private> emu_wlid: u32;",
    "fn emu_mma(a: EmuF, b: EmuF, c: EmuR) -> EmuR {",
    "  var r = c;",
    "  for (var e = 0u; e < 8u; e++) {",
    "    let idx = emu_lid * 8u + e;",
    "    var acc = 0.0;",
    "    for (var k = 0u; k < 16u; k++) {",
    "      acc += a.e[(idx / 16u) * 16u + k] * b.e[k * 16u + idx % 16u];",
    "    }",
    "    r.e[e] += acc;",
    "  }",
    "  return r;",
    "}",
  ];
  if (shuffles) {
    // (xor with m < 32 stays inside the subgroup)
    lines.push(
      "var<workgroup> emu_f: array<f32, 1024>;",
      "fn emu_xor_f32(x: f32, m: u32) -> f32 {",
      "  workgroupBarrier();",
      "  emu_f[emu_wlid] = x;",
      "  workgroupBarrier();",
      "  return emu_f[emu_wlid ^ m];",
      "}",
    );
  }
  for (const target of stores) {
    lines.push(
      `fn emu_store_${target.replace(/^wg\./, "")}(off: u32, m: EmuR, stride: u32) {`,
      "  for (var e = 0u; e < 8u; e++) {",
      "    let idx = emu_lid * 8u + e;",
      `    ${target}[off + (idx / 16u) * stride + idx % 16u] = m.e[e];`,
      "  }",
      "}",
    );
  }
  for (const [source, k] of loads) {
    const arr = source.replace(/^wg\./, "");
    // element (r, c) of the matrix: row_major at off + r stride + c, col_major at off + c stride + r
    // (emu_ names: the shader's own names, such as a binding `c`, stay visible)
    const at = [
      "    var emu_at = off + emu_r * stride + emu_c;",
      "    if (major == 1u) {",
      "      emu_at = off + emu_c * stride + emu_r;",
      "    }",
    ];
    if (k === "f") {
      lines.push(
        `fn emu_load_${arr}_f(major: u32, off: u32, stride: u32) -> EmuF {`,
        "  var m: EmuF;",
        "  for (var idx = 0u; idx < 256u; idx++) {",
        "    let emu_r = idx / 16u;",
        "    let emu_c = idx % 16u;",
        ...at,
        `    m.e[idx] = f32(${source}[emu_at]);`,
        "  }",
        "  return m;",
        "}",
      );
    } else {
      lines.push(
        `fn emu_load_${arr}_r(major: u32, off: u32, stride: u32) -> EmuR {`,
        "  var m: EmuR;",
        "  for (var e = 0u; e < 8u; e++) {",
        "    let idx = emu_lid * 8u + e;",
        "    let emu_r = idx / 16u;",
        "    let emu_c = idx % 16u;",
        ...at,
        `    m.e[e] = f32(${source}[emu_at]);`,
        "  }",
        "  return m;",
        "}",
      );
    }
  }
  return t + "\n" + lines.join("\n") + "\n";
}
