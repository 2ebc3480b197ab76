/**
 * The size of a shader's workgroup struct `Wg` by WGSL's layout rules, for tests that check a
 * kernel's workgroupBytes against what its shader declares.
 */

/**
 * Bytes and member count of the shader's struct Wg (members: arrays of f16, f32, u32 or
 * atomic<u32>), its array lengths evaluated from the shader's u32 consts and `consts`.
 */
export function wgStructLayout(
  wgsl: string,
  consts: Readonly<Record<string, number>>,
): { bytes: number; members: number } {
  const values: Record<string, number> = { ...consts };
  for (const m of wgsl.matchAll(/^const (\w+): u32 = ([^;]+);/gm)) {
    values[m[1]] = evalU32(m[2], values);
  }
  const body = /struct Wg \{([^}]*)\}/.exec(wgsl)?.[1];
  if (!body) throw new Error("the shader declares no struct Wg");
  let size = 0;
  let align = 1;
  let members = 0;
  for (const m of body.matchAll(/^\s*\w+: array<(f16|f32|u32|atomic<u32>), ([^>]+)>,/gm)) {
    const elem = m[1] === "f16" ? 2 : 4;
    size = Math.ceil(size / elem) * elem + elem * evalU32(m[2], values);
    align = Math.max(align, elem);
    members++;
  }
  return { bytes: Math.ceil(size / align) * align, members };
}

/** A WGSL u32 const expression of literals, consts, + - * / and max(). */
function evalU32(expr: string, values: Record<string, number>): number {
  const js = expr.replace(/(\d+)u\b/g, "$1").replace(/\bmax\(/g, "Math.max(")
    .replace(/\b[A-Z][A-Z_0-9]*\b/g, (n) => {
      if (!(n in values)) throw new Error(`unknown const ${n} in ${expr}`);
      return String(values[n]);
    });
  if (!/^[\d\s+*\/()Mathmax.,-]+$/.test(js)) throw new Error(`cannot evaluate ${expr}`);
  return Math.floor(new Function(`return ${js}`)() as number);
}
