import { test } from "uvu";
import * as assert from "uvu/assert";
import { Rng } from "../../src/util/rng.ts";
import {
  packSamplingRows,
  sampleParams,
  sampleRef,
  type SamplingRow,
  spec,
} from "../../kernels/sample.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { dispatchOnce } from "./dispatch_once.ts";

/** The ids of both forms (256 and 1024 invocations a row), which must agree. */
async function sampleGpu(logits: Float32Array, vocab: number, rows: SamplingRow[]) {
  const ids: number[][] = [];
  for (const variant of ["f32", "f32-wg1024"]) {
    const out = await dispatchOnce(
      await sharedGpu(),
      spec,
      variant,
      sampleParams(rows.length, vocab),
      {
        logits,
        sampling: packSamplingRows(rows),
      },
      { sampled: rows.length * 4 },
    );
    ids.push([...new Int32Array(out.sampled)]);
  }
  assert.equal(ids[1], ids[0], "the 1024-invocation form samples what the 256 one does");
  return ids[0];
}

test("temperature 0 returns the lowest id among tied maxima", async () => {
  const vocab = 1000;
  const logits = new Float32Array(3 * vocab).fill(-1);
  logits[0 * vocab + 700] = 5;
  logits[0 * vocab + 300] = 5; // row 0: tie between 300 and 700
  logits[1 * vocab + 999] = 0.5; // row 1: the last id wins alone
  // row 2: every logit equal
  const greedy = { temperature: 0, seed: 1, position: 0 };
  assert.equal(await sampleGpu(logits, vocab, [greedy, greedy, greedy]), [300, 999, 0]);
});

test("a row samples the same token whatever batch it is in: the noise is keyed by (seed, position)", async () => {
  const vocab = 300;
  const rng = Rng.fromSeed("batch independence");
  const a = rng.fillNormal(new Float32Array(vocab));
  const b = rng.fillNormal(new Float32Array(vocab));
  const ra = { temperature: 1, seed: 42, position: 7 };
  const rb = { temperature: 0.8, seed: 42, position: 8 };
  const first = await sampleGpu(new Float32Array([...a, ...b]), vocab, [ra, rb]);
  const filler = { temperature: 1.2, seed: 3, position: 0 };
  const second = await sampleGpu(
    new Float32Array([...rng.fillNormal(new Float32Array(vocab)), ...b, ...a]),
    vocab,
    [filler, rb, ra],
  );
  assert.equal(second.slice(1), [first[1], first[0]]);
});

test("Gumbel-max sampling follows softmax(logits / T), for one seed over successive positions", async () => {
  // vocab of 4 with probabilities 0.1 / 0.2 / 0.3 / 0.4 at temperature 0.5
  const temperature = 0.5;
  const probs = [0.1, 0.2, 0.3, 0.4];
  const row = new Float32Array(probs.map((p) => Math.log(p) * temperature));
  const n = 20000;
  const logits = new Float32Array(n * 4);
  for (let r = 0; r < n; r++) logits.set(row, r * 4);
  const rows = Array.from({ length: n }, (_, position) => ({ temperature, seed: 1234, position }));
  const want = sampleRef(logits, n, 4, packSamplingRows(rows));
  const counts = [0, 0, 0, 0];
  for (const id of want) counts[id]++;
  for (let i = 0; i < 4; i++) {
    // 4 standard deviations of a binomial frequency at n = 20000 is below 0.014
    assert.ok(Math.abs(counts[i] / n - probs[i]) < 0.014, `id ${i}: ${counts[i] / n}`);
  }
  // The GPU draws exactly the reference's tokens.
  const got = await sampleGpu(logits.subarray(0, 2000 * 4), 4, rows.slice(0, 2000));
  assert.equal(got, [...want.subarray(0, 2000)]);
});

test("sampling rows refuse a negative temperature and a seed that is not a u32", () => {
  assert.throws(() => packSamplingRows([{ temperature: -1, seed: 0, position: 0 }]), /temperature/);
  assert.throws(() => packSamplingRows([{ temperature: 1, seed: 2 ** 32, position: 0 }]), /seed/);
  assert.throws(() => sampleParams(1, 0), /vocab = 0/);
});

test.run();
