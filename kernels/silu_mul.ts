/** SwiGLU activation of a fused gate|up projection: `out = silu(gate) * up`. */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({ tokens: "u32", inter: "u32" });
const WG = 256;

export const spec: KernelSpec<typeof params.fields> = {
  name: "silu_mul",
  shader: "silu_mul.wgsl",
  params,
  bindings: [
    { name: "gate_up", type: "f32", access: "read", shape: "[tokens, 2 * inter]" },
    { name: "out", type: "f32", access: "read_write", shape: "[tokens, inter]" },
  ],
  variants: [{ name: "f32", dtype: "f32", consts: { WG } }],
  grid: (p, _v, gpu) => grid1d(Math.ceil((p.tokens * p.inter) / WG), gpu),
};

/** CPU reference. */
export function siluMulRef(gateUp: Float32Array, tokens: number, inter: number): Float32Array {
  const out = new Float32Array(tokens * inter);
  for (let t = 0; t < tokens; t++) {
    for (let i = 0; i < inter; i++) {
      const g = gateUp[t * 2 * inter + i], u = gateUp[t * 2 * inter + inter + i];
      out[t * inter + i] = (g / (1 + Math.exp(-g))) * u;
    }
  }
  return out;
}

function siluCase(tokens: number, inter: number): KernelCase<typeof params.fields> {
  return {
    label: `tokens=${tokens} inter=${inter}`,
    params: { tokens, inter },
    inputs: (rng) => ({ gate_up: rng.fillNormal(new Float32Array(tokens * 2 * inter), 2) }),
    outputs: { out: tokens * inter },
    reference: (inp) => ({ out: siluMulRef(inp.gate_up as Float32Array, tokens, inter) }),
    tolerance: () => ({ atol: 1e-6, rtol: 1e-5 }),
    bytes: () => tokens * inter * 12,
    flops: tokens * inter * 5,
  };
}

export const cases = [siluCase(1, 7), siluCase(19, 300), siluCase(128, 768), siluCase(512, 14336)];
