/**
 * The per-token math of the CPU reference model: f32 inputs and outputs (every result is
 * stored as f32, as a GPU kernel would), f64 accumulation inside each op.
 *
 * ```ts
 * const y = matVec(w, x, rows, cols); // y[r] = sum_c w[r * cols + c] * x[c]
 * ```
 */

/** y = W x for a row-major W [rows, cols]. */
export function matVec(w: Float32Array, x: Float32Array, rows: number, cols: number): Float32Array {
  const y = new Float32Array(rows);
  for (let r = 0; r < rows; r++) {
    let acc = 0;
    const base = r * cols;
    for (let c = 0; c < cols; c++) acc += w[base + c] * x[c];
    y[r] = acc;
  }
  return y;
}

/**
 * RMSNorm of each consecutive `dim`-sized group of x: x / sqrt(mean(x^2) + eps) * weight
 * (weight [dim]). One group for a hidden vector, one per head for q/k norm.
 */
export function rmsNorm(x: Float32Array, weight: Float32Array, eps: number): Float32Array {
  const dim = weight.length;
  const y = new Float32Array(x.length);
  for (let g = 0; g < x.length; g += dim) {
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += x[g + i] * x[g + i];
    const inv = Math.fround(1 / Math.sqrt(Math.fround(ss / dim) + eps));
    for (let i = 0; i < dim; i++) y[g + i] = weight[i] * Math.fround(x[g + i] * inv);
  }
  return y;
}

/**
 * Inverse frequencies of default RoPE, computed in f32 as transformers does:
 * inv_freq[i] = 1 / theta^(2i / headDim), i < headDim / 2.
 */
export function ropeInvFreq(theta: number, headDim: number): Float32Array {
  const inv = new Float32Array(headDim / 2);
  for (let i = 0; i < inv.length; i++) {
    inv[i] = 1 / Math.fround(theta ** Math.fround((2 * i) / headDim));
  }
  return inv;
}

/**
 * Rotates each head of x in place by RoPE at `position`, neox style (rotate halves, as HF
 * Qwen3 and Mixtral do): for i < d/2, (x[i], x[i+d/2]) -> (x[i] cos - x[i+d/2] sin,
 * x[i+d/2] cos + x[i] sin), with angle = position * invFreq[i] in f32.
 */
export function applyRope(
  x: Float32Array,
  headDim: number,
  position: number,
  invFreq: Float32Array,
) {
  const half = headDim / 2;
  for (let i = 0; i < half; i++) {
    const angle = Math.fround(position * invFreq[i]);
    const cos = Math.fround(Math.cos(angle));
    const sin = Math.fround(Math.sin(angle));
    for (let h = 0; h < x.length; h += headDim) {
      const a = x[h + i], b = x[h + half + i];
      x[h + i] = a * cos - b * sin;
      x[h + half + i] = b * cos + a * sin;
    }
  }
}

/** SiLU(x) = x / (1 + e^-x). */
export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** Softmax of x (f64 internally), as f64 numbers. */
export function softmax(x: ArrayLike<number>): number[] {
  let max = -Infinity;
  for (let i = 0; i < x.length; i++) max = Math.max(max, x[i]);
  const out = new Array<number>(x.length);
  let sum = 0;
  for (let i = 0; i < x.length; i++) {
    out[i] = Math.exp(x[i] - max);
    sum += out[i];
  }
  for (let i = 0; i < x.length; i++) out[i] /= sum;
  return out;
}

/** Indices of the k largest values, largest first; ties go to the lower index. */
export function topK(values: ArrayLike<number>, k: number): number[] {
  const idx = Array.from({ length: values.length }, (_, i) => i);
  idx.sort((a, b) => values[b] - values[a] || a - b);
  return idx.slice(0, k);
}

/** A SwiGLU MLP on one token: down(silu(gate x) * up x). */
export function swiglu(
  x: Float32Array,
  gate: Float32Array,
  up: Float32Array,
  down: Float32Array,
  hidden: number,
  inter: number,
): Float32Array {
  const g = matVec(gate, x, inter, hidden);
  const u = matVec(up, x, inter, hidden);
  const act = new Float32Array(inter);
  for (let i = 0; i < inter; i++) act[i] = Math.fround(silu(g[i])) * u[i];
  return matVec(down, act, hidden, inter);
}
