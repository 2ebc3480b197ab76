/**
 * How two logits files of the same prompt differ (`deno task logits` writes them): one
 * kernel form against another, f16 against f32, this GPU against another. Reads both files a
 * few rows at a time (a 2048-token prompt's logits are 1.2 GB each) and reports the mean and
 * largest |a - b|, where the largest is, the spread of b (to read them against), and at how
 * many positions the greedy token agrees.
 *
 * ```ts
 * const d = compareLogitsFiles("tcs.safetensors", "lane.safetensors");
 * console.log(d.argmaxAgree, "of", d.tokens, "argmax equal; mean |diff|", d.meanAbsDiff);
 * ```
 */
import { SafetensorsFile } from "./safetensors_file.ts";
import { tensorToF32 } from "./tensor_convert.ts";

export interface LogitsComparison {
  readonly tokens: number;
  readonly vocab: number;
  /** Mean and largest |a - b| over every position and vocabulary entry. */
  readonly meanAbsDiff: number;
  readonly maxAbsDiff: number;
  /** Where the largest difference is. */
  readonly maxAt: { readonly position: number; readonly tokenId: number };
  /** Standard deviation of b's logits (the scale the differences compare with). */
  readonly stdB: number;
  /** Positions whose argmax is the same in both. */
  readonly argmaxAgree: number;
  /** The positions whose argmax differs (at most the first 32). */
  readonly argmaxDiffer: readonly number[];
  /** Positions of which a non-finite value stands in either file. */
  readonly nonFinitePositions: number;
}

/** Rows read at a time from each file. */
const ROWS = 16;

/**
 * Compares the `logits` [tokens, vocab] F32 tensors of two files whose `token_ids` are
 * equal; throws an error naming the file and the problem otherwise.
 */
export function compareLogitsFiles(pathA: string, pathB: string): LogitsComparison {
  const a = SafetensorsFile.open(pathA);
  try {
    const b = SafetensorsFile.open(pathB);
    try {
      return compareOpen(a, b);
    } finally {
      b.close();
    }
  } finally {
    a.close();
  }
}

function compareOpen(a: SafetensorsFile, b: SafetensorsFile): LogitsComparison {
  const [tokens, vocab] = logitsShape(a);
  const [tokensB, vocabB] = logitsShape(b);
  if (tokens !== tokensB || vocab !== vocabB) {
    throw new Error(
      `${b.path}: logits are [${tokensB}, ${vocabB}], ${a.path} has [${tokens}, ${vocab}]`,
    );
  }
  const idsA = tokenIds(a), idsB = tokenIds(b);
  if (idsA && idsB) {
    const at = idsA.findIndex((id, i) => id !== idsB[i]);
    if (idsA.length !== idsB.length || at >= 0) {
      throw new Error(
        `${b.path}: not the same prompt as ${a.path} (token ids differ at position ${
          at >= 0 ? at : Math.min(idsA.length, idsB.length)
        })`,
      );
    }
  }
  let sum = 0, max = -1, maxPos = 0, maxTok = 0;
  let sumB = 0, sumB2 = 0, count = 0;
  let agree = 0, nonFinite = 0;
  const differ: number[] = [];
  for (let r0 = 0; r0 < tokens; r0 += ROWS) {
    const n = Math.min(ROWS, tokens - r0);
    const ra = tensorToF32(a.readRows("logits", r0, n), "F32");
    const rb = tensorToF32(b.readRows("logits", r0, n), "F32");
    for (let r = 0; r < n; r++) {
      const o = r * vocab;
      let bestA = 0, bestB = 0, finite = true;
      for (let v = 0; v < vocab; v++) {
        const x = ra[o + v], y = rb[o + v];
        if (!Number.isFinite(x) || !Number.isFinite(y)) {
          finite = false;
          continue;
        }
        const d = Math.abs(x - y);
        sum += d;
        count++;
        if (d > max) {
          max = d;
          maxPos = r0 + r;
          maxTok = v;
        }
        sumB += y;
        sumB2 += y * y;
        if (x > ra[o + bestA]) bestA = v;
        if (y > rb[o + bestB]) bestB = v;
      }
      if (!finite) nonFinite++;
      if (bestA === bestB) agree++;
      else if (differ.length < 32) differ.push(r0 + r);
    }
  }
  const mean = count > 0 ? sumB / count : 0;
  return {
    tokens,
    vocab,
    meanAbsDiff: count > 0 ? sum / count : 0,
    maxAbsDiff: Math.max(0, max),
    maxAt: { position: maxPos, tokenId: maxTok },
    stdB: count > 0 ? Math.sqrt(Math.max(0, sumB2 / count - mean * mean)) : 0,
    argmaxAgree: agree,
    argmaxDiffer: differ,
    nonFinitePositions: nonFinite,
  };
}

function logitsShape(f: SafetensorsFile): [number, number] {
  if (!f.has("logits")) throw new Error(`${f.path}: no tensor named logits`);
  const info = f.info("logits");
  if (info.dtype !== "F32" || info.shape.length !== 2) {
    throw new Error(
      `${f.path}: logits must be F32 [tokens, vocab], not ${info.dtype} [${info.shape.join(", ")}]`,
    );
  }
  return [info.shape[0], info.shape[1]];
}

function tokenIds(f: SafetensorsFile): Int32Array | null {
  if (!f.has("token_ids")) return null;
  const bytes = f.read("token_ids");
  return new Int32Array(bytes.slice().buffer);
}
