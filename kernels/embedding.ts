/**
 * Embedding gather: `out[t, :] = table[id(t), :]`, where a token may come from the
 * previous step's sampled ids still on the GPU (`prev_ref[t] >= 0`).
 */
import type { KernelCase } from "./case.ts";
import { grid1d, type KernelSpec } from "./kernel.ts";
import { defineParams } from "./params.ts";

const params = defineParams({ tokens: "u32", hidden: "u32", vocab: "u32" });

export const spec: KernelSpec<typeof params.fields> = {
  name: "embedding",
  shader: "embedding.wgsl",
  params,
  bindings: [
    { name: "token_ids", type: "i32", access: "read", shape: "[tokens]" },
    { name: "prev_ref", type: "i32", access: "read", shape: "[tokens]" },
    { name: "prev_sampled", type: "i32", access: "read", shape: "[previous samples]" },
    { name: "table", type: "T", access: "read", shape: "[vocab, hidden]" },
    { name: "out", type: "f32", access: "read_write", shape: "[tokens, hidden]" },
  ],
  variants: [
    { name: "f32", dtype: "f32", consts: { WG: 64 } },
    { name: "f16", dtype: "f16", consts: { WG: 64 } },
  ],
  grid: (p, _v, gpu) => grid1d(p.tokens, gpu),
};

/** CPU reference. */
export function embeddingRef(
  tokenIds: Int32Array,
  prevRef: Int32Array,
  prevSampled: Int32Array,
  table: Float32Array,
  hidden: number,
): Float32Array {
  const out = new Float32Array(tokenIds.length * hidden);
  for (let t = 0; t < tokenIds.length; t++) {
    const id = prevRef[t] >= 0 ? prevSampled[prevRef[t]] : tokenIds[t];
    out.set(table.subarray(id * hidden, (id + 1) * hidden), t * hidden);
  }
  return out;
}

function embeddingCase(tokens: number, vocab: number, hidden: number) {
  const c: KernelCase<typeof params.fields> = {
    label: `tokens=${tokens} vocab=${vocab} hidden=${hidden}`,
    params: { tokens, hidden, vocab },
    inputs: (rng) => {
      const ids = new Int32Array(tokens).map(() => rng.int(0, vocab));
      const prevSampled = new Int32Array(4).map(() => rng.int(0, vocab));
      // every third token comes from the previous step's samples
      const prevRef = new Int32Array(tokens).map((_, i) => (i % 3 === 2 ? i % 4 : -1));
      return {
        token_ids: ids,
        prev_ref: prevRef,
        prev_sampled: prevSampled,
        table: rng.fillNormal(new Float32Array(vocab * hidden)),
      };
    },
    outputs: { out: tokens * hidden },
    reference: (inp) => ({
      out: embeddingRef(
        inp.token_ids as Int32Array,
        inp.prev_ref as Int32Array,
        inp.prev_sampled as Int32Array,
        inp.table as Float32Array,
        hidden,
      ),
    }),
    tolerance: () => ({ atol: 0, rtol: 0 }),
    bytes: (v) => tokens * hidden * (4 + (v.dtype === "f16" ? 2 : 4)) + tokens * 8,
    flops: 0,
  };
  return c;
}

export const cases = [
  embeddingCase(1, 1000, 64),
  embeddingCase(37, 5003, 130),
  embeddingCase(256, 32000, 2048),
];
