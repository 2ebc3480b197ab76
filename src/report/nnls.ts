/**
 * Non-negative least squares, min ||A x - b|| subject to x >= 0 (Lawson and Hanson's
 * active-set method), for the planner-style latency fits with a handful of columns.
 * Columns are scaled to unit norm inside, so an intercept column of ones and a column of
 * KV tokens in the millions fit together.
 *
 * ```ts
 * // wall = c0 + c1 * tokens, c >= 0
 * const { x } = nnls([[1, 128], [1, 256], [1, 512]], [3.1, 5.0, 9.2]);
 * ```
 */

/** The solution and its residual norm. */
export interface NnlsResult {
  readonly x: readonly number[];
  /** ||A x - b||. */
  readonly residualNorm: number;
}

/** Solves min ||A x - b||, x >= 0. `rows` are the rows of A. */
export function nnls(rows: readonly (readonly number[])[], b: readonly number[]): NnlsResult {
  const m = rows.length;
  if (m === 0) throw new Error("nnls: no rows");
  if (b.length !== m) throw new Error(`nnls: ${m} rows but ${b.length} right-hand values`);
  const n = rows[0].length;
  for (const r of rows) {
    if (r.length !== n) throw new Error("nnls: rows differ in length");
    for (const v of r) if (!Number.isFinite(v)) throw new Error("nnls: a non-finite matrix entry");
  }
  for (const v of b) {
    if (!Number.isFinite(v)) throw new Error("nnls: a non-finite right-hand value");
  }
  const scale = Array.from({ length: n }, (_, j) => {
    const norm = Math.sqrt(rows.reduce((s, r) => s + r[j] * r[j], 0));
    return norm > 0 ? norm : 1;
  });
  const A = rows.map((r) => r.map((v, j) => v / scale[j]));
  const x = new Array<number>(n).fill(0);
  const passive = new Array<boolean>(n).fill(false);
  const tol = 1e-12 * Math.max(1, Math.sqrt(b.reduce((s, v) => s + v * v, 0)));
  const gradient = () => {
    const r = b.map((bi, i) => bi - A[i].reduce((s, a, j) => s + a * x[j], 0));
    return Array.from({ length: n }, (_, j) => A.reduce((s, row, i) => s + row[j] * r[i], 0));
  };
  for (let outer = 0; outer < 3 * n + 10; outer++) {
    const w = gradient();
    let best = -1;
    for (let j = 0; j < n; j++) {
      if (!passive[j] && w[j] > tol && (best < 0 || w[j] > w[best])) best = j;
    }
    if (best < 0) break;
    passive[best] = true;
    for (let inner = 0; inner < 3 * n + 10; inner++) {
      const idx = passive.flatMap((p, j) => (p ? [j] : []));
      const z = solveLeastSquares(A, b, idx);
      const zFull = new Array<number>(n).fill(0);
      idx.forEach((j, k) => (zFull[j] = z[k]));
      if (idx.every((j) => zFull[j] > 0)) {
        for (let j = 0; j < n; j++) x[j] = zFull[j];
        break;
      }
      let alpha = Infinity;
      for (const j of idx) {
        if (zFull[j] <= 0) alpha = Math.min(alpha, x[j] / (x[j] - zFull[j]));
      }
      for (let j = 0; j < n; j++) x[j] += alpha * (zFull[j] - x[j]);
      for (const j of idx) {
        if (x[j] <= 1e-15) {
          x[j] = 0;
          passive[j] = false;
        }
      }
    }
  }
  const residual = Math.sqrt(
    b.reduce((s, bi, i) => s + (bi - A[i].reduce((t, a, j) => t + a * x[j], 0)) ** 2, 0),
  );
  return { x: x.map((v, j) => v / scale[j]), residualNorm: residual };
}

/** Keeps collinear columns (every row at one batch size) solvable; columns have unit norm. */
const RIDGE = 1e-10;

/** Unconstrained least squares on the columns `idx` (normal equations, pivoted). */
function solveLeastSquares(A: number[][], b: readonly number[], idx: number[]): number[] {
  const k = idx.length;
  const M = Array.from(
    { length: k },
    (_, p) =>
      Array.from(
        { length: k + 1 },
        (_, q) =>
          q < k
            ? A.reduce((s, row) => s + row[idx[p]] * row[idx[q]], 0) + (p === q ? RIDGE : 0)
            : A.reduce((s, row, i) => s + row[idx[p]] * b[i], 0),
      ),
  );
  for (let c = 0; c < k; c++) {
    let piv = c;
    for (let r = c + 1; r < k; r++) if (Math.abs(M[r][c]) > Math.abs(M[piv][c])) piv = r;
    [M[c], M[piv]] = [M[piv], M[c]];
    for (let r = 0; r < k; r++) {
      if (r === c) continue;
      const f = M[r][c] / M[c][c];
      for (let q = c; q <= k; q++) M[r][q] -= f * M[c][q];
    }
  }
  return M.map((row, c) => row[k] / row[c]);
}
