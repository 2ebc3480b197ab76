import { test } from "uvu";
import * as assert from "uvu/assert";
import { nnls } from "../../src/report/nnls.ts";

test("nnls recovers exact non-negative coefficients of a line and a plane", () => {
  const line = nnls([[1, 128], [1, 256], [1, 512], [1, 1024]], [
    3 + 0.01 * 128,
    3 + 0.01 * 256,
    3 + 0.01 * 512,
    3 + 0.01 * 1024,
  ]);
  assert.ok(Math.abs(line.x[0] - 3) < 1e-8 && Math.abs(line.x[1] - 0.01) < 1e-11, String(line.x));
  const rows = [[1, 1, 100], [1, 4, 4000], [1, 8, 800], [1, 16, 160000], [1, 2, 2e6]];
  const b = rows.map(([, B, K]) => 2 + 0.5 * B + 1e-5 * K);
  const plane = nnls(rows, b);
  assert.ok(Math.abs(plane.x[0] - 2) < 1e-7, String(plane.x));
  assert.ok(Math.abs(plane.x[1] - 0.5) < 1e-8, String(plane.x));
  assert.ok(Math.abs(plane.x[2] - 1e-5) < 1e-12, String(plane.x));
  assert.ok(plane.residualNorm < 1e-6);
});

test("a coefficient the data wants negative is held at zero, and the rest refit", () => {
  // wall falls with tokens: unconstrained slope < 0; NNLS keeps slope 0, intercept = mean
  const { x } = nnls([[1, 1], [1, 2], [1, 3]], [3, 2, 1]);
  assert.equal(x[1], 0);
  assert.ok(Math.abs(x[0] - 2) < 1e-9, String(x));
  // a negative intercept is clamped too: best slope through the origin
  const y = nnls([[1, 1], [1, 2], [1, 3]], [1, 3, 5]);
  assert.equal(y.x[0], 0);
  assert.ok(Math.abs(y.x[1] - 22 / 14) < 1e-9, String(y.x));
});

test("nnls matches brute force over every active set on random problems", () => {
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let trial = 0; trial < 50; trial++) {
    const rows = Array.from({ length: 8 }, () => [1, rnd() * 10, rnd() * 1000]);
    const b = rows.map(() => rnd() * 10 - 3);
    const got = nnls(rows, b);
    let best = Infinity;
    for (let mask = 0; mask < 8; mask++) {
      const cols = [0, 1, 2].filter((j) => mask & (1 << j));
      // unconstrained least squares on the subset by brute normal equations via nnls on positives
      const sub = nnls(rows.map((r) => cols.map((j) => r[j])), b);
      best = Math.min(best, sub.residualNorm);
    }
    assert.ok(got.residualNorm <= best + 1e-9, `trial ${trial}: ${got.residualNorm} > ${best}`);
    assert.ok(got.x.every((v) => v >= 0));
  }
});

test("nnls names bad input", () => {
  assert.throws(() => nnls([], []), /no rows/);
  assert.throws(() => nnls([[1, 2]], [1, 2]), /right-hand/);
  assert.throws(() => nnls([[1, NaN]], [1]), /non-finite/);
});

test.run();
