/**
 * One definition of a kernel's params struct: it generates both the WGSL struct and the
 * TypeScript packer, so the field order is written in exactly one place.
 *
 * ```ts
 * const layout = defineParams({ rows: "u32", cols: "u32", eps: "f32" });
 * layout.wgsl; // "struct Params {\n  rows: u32,\n  cols: u32,\n  eps: f32,\n  _pad0: u32,\n}"
 * const bytes = layout.pack({ rows: 7, cols: 300, eps: 1e-6 }); // 16 bytes
 * ```
 */

/** Scalar types a params field may have (all 4 bytes, so offsets are 4 * index). */
export type ParamType = "u32" | "i32" | "f32";
export type ParamFields = Record<string, ParamType>;
export type ParamValues<F extends ParamFields> = { readonly [K in keyof F]: number };

export interface ParamsLayout<F extends ParamFields> {
  readonly fields: F;
  /** Byte size, rounded up to 16 (uniform buffer rule). */
  readonly size: number;
  /** `struct Params { ... }` for the shader prelude. */
  readonly wgsl: string;
  /** Packs values into `out` at byte `offset` (or into a new buffer). */
  pack(values: ParamValues<F>, out?: DataView, offset?: number): Uint8Array;
}

/** Defines a params struct; field order is the object's key order. */
export function defineParams<const F extends ParamFields>(fields: F): ParamsLayout<F> {
  const names = Object.keys(fields);
  if (names.length === 0) throw new Error("defineParams: a params struct needs a field");
  const size = Math.ceil((names.length * 4) / 16) * 16;
  const pads = (size - names.length * 4) / 4;
  const lines = names.map((n) => `  ${n}: ${fields[n]},`);
  for (let i = 0; i < pads; i++) lines.push(`  _pad${i}: u32,`);
  const wgsl = `struct Params {\n${lines.join("\n")}\n}`;
  return Object.freeze({
    fields,
    size,
    wgsl,
    pack(values: ParamValues<F>, out?: DataView, offset = 0): Uint8Array {
      const view = out ?? new DataView(new ArrayBuffer(size));
      for (let i = 0; i < names.length; i++) {
        const name = names[i];
        const value = values[name];
        if (typeof value !== "number" || Number.isNaN(value)) {
          throw new Error(`params: field '${name}' is ${value}`);
        }
        const at = offset + i * 4;
        const type = fields[name];
        if (type === "f32") view.setFloat32(at, value, true);
        else if (type === "i32") view.setInt32(at, value, true);
        else {
          if (value < 0 || value > 0xffffffff || !Number.isInteger(value)) {
            throw new Error(`params: u32 field '${name}' = ${value} is out of range`);
          }
          view.setUint32(at, value, true);
        }
      }
      return new Uint8Array(view.buffer, view.byteOffset + offset, size);
    },
  });
}
