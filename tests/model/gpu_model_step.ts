/**
 * Hand-built StepBatches for GPU model tests: sequences described by their tokens (or
 * references into the previous step's sampled ids), first position and block table.
 */
import type { SamplingParams, StepBatch, StepSequence } from "../../src/model/step_batch.ts";
import type { GpuModel } from "../../src/model/gpu_model.ts";

/** An input token: an id, or `{ ref: j }` = row j of the previous step's sampled ids. */
export type StepInput = number | { readonly ref: number };

/** One sequence of a step. */
export interface StepPart {
  readonly tokens: readonly StepInput[];
  /** Position of the first token (tokens before it are in the KV cache). */
  readonly start: number;
  /** Physical blocks covering positions [0, start + tokens.length). */
  readonly table: readonly number[];
  /** Rows to sample: every token, the last one, or none. */
  readonly rows: "all" | "last" | "none";
}

/** An extra sampled row: token `index` of part `part`, sampled with its own params. */
export interface ExtraRow extends SamplingParams {
  readonly part: number;
  readonly index: number;
}

/** What a step gave back. */
export interface StepResult {
  readonly batch: StepBatch;
  /** [rows, vocab], rows in StepBatch.sampleTokenIndices order. */
  readonly logits: Float32Array;
  readonly sampled: Int32Array;
  /** Row numbers of each part's sampled rows (then the extra rows, in `extraRows`). */
  readonly partRows: readonly number[][];
  readonly extraRows: readonly number[];
}

/** Builds the StepBatch of `parts` (greedy rows) plus `extra` rows and CoW `copies`. */
export function buildBatch(
  blockSize: number,
  parts: readonly StepPart[],
  extra: readonly ExtraRow[] = [],
  copies: readonly (readonly [number, number])[] = [],
): { batch: StepBatch; partRows: number[][]; extraRows: number[] } {
  const tokenIds: number[] = [], prevRef: number[] = [], positions: number[] = [];
  const slots: number[] = [], sampleIdx: number[] = [];
  const sampling: SamplingParams[] = [];
  const seqs: StepSequence[] = [];
  const partRows: number[][] = [];
  const firstIndex: number[] = [];
  for (const p of parts) {
    const q = tokenIds.length;
    firstIndex.push(q);
    const rows: number[] = [];
    p.tokens.forEach((t, k) => {
      const pos = p.start + k;
      tokenIds.push(typeof t === "number" ? t : 0);
      prevRef.push(typeof t === "number" ? -1 : t.ref);
      positions.push(pos);
      slots.push(p.table[Math.floor(pos / blockSize)] * blockSize + (pos % blockSize));
      if (p.rows === "all" || (p.rows === "last" && k === p.tokens.length - 1)) {
        rows.push(sampleIdx.length);
        sampleIdx.push(q + k);
        sampling.push({ temperature: 0, seed: 0 });
      }
    });
    partRows.push(rows);
    const contextLen = p.start + p.tokens.length;
    seqs.push({
      queryStart: q,
      queryLen: p.tokens.length,
      contextLen,
      blockTable: Int32Array.from(p.table.slice(0, Math.ceil(contextLen / blockSize))),
    });
  }
  const extraRows = extra.map((e) => {
    sampleIdx.push(firstIndex[e.part] + e.index);
    sampling.push({ temperature: e.temperature, seed: e.seed });
    return sampleIdx.length - 1;
  });
  const batch: StepBatch = {
    tokenIds: Int32Array.from(tokenIds),
    prevSampleRef: Int32Array.from(prevRef),
    positions: Int32Array.from(positions),
    seqs,
    slotMapping: Int32Array.from(slots),
    sampleTokenIndices: Int32Array.from(sampleIdx),
    sampling,
    blockCopies: copies,
    logits: true,
  };
  return { batch, partRows, extraRows };
}

/** Runs one step of `parts` and waits for its sampled ids and logits. */
export async function runStep(
  model: GpuModel,
  parts: readonly StepPart[],
  extra: readonly ExtraRow[] = [],
  copies: readonly (readonly [number, number])[] = [],
): Promise<StepResult> {
  const { batch, partRows, extraRows } = buildBatch(model.blockSize, parts, extra, copies);
  const out = model.forward(batch);
  const [sampled, logits] = await Promise.all([out.sampled, out.logits!]);
  return { batch, logits, sampled, partRows, extraRows };
}

/**
 * A prompt of 20 tokens prefilled for each block table's sequence (sequence s's tokens shifted
 * by s), then `decodeSteps` decode steps fed from the GPU: the last rows' logits of the
 * prefill (first, with `withPrefill`) and of each decode step.
 */
export async function prefillThenDecode(
  model: GpuModel,
  tables: readonly (readonly number[])[],
  decodeSteps: number,
  withPrefill = false,
): Promise<Float32Array[]> {
  const prompt = Array.from({ length: 20 }, (_, i) => 100 + 37 * i);
  const prefill = await runStep(
    model,
    tables.map((table, s) => ({
      tokens: prompt.map((t) => t + s),
      start: 0,
      table: [...table],
      rows: "last" as const,
    })),
  );
  const out = withPrefill ? [prefill.logits] : [];
  for (let step = 0; step < decodeSteps; step++) {
    const parts: StepPart[] = tables.map((table, s) => ({
      tokens: [{ ref: s }],
      start: prompt.length + step,
      table: [...table],
      rows: "last",
    }));
    out.push((await runStep(model, parts)).logits);
  }
  return out;
}

/** Row `r` of a [rows, vocab] matrix. */
export function row(m: Float32Array, vocab: number, r: number): Float32Array {
  return m.subarray(r * vocab, (r + 1) * vocab);
}

/** Largest |a - b| (NaN anywhere -> Infinity). */
export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`lengths differ: ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

/** Index of the largest value (the lowest index among ties). */
export function argmax(v: Float32Array): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
  return best;
}
