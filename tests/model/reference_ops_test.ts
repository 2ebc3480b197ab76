import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  applyRope,
  matVec,
  rmsNorm,
  ropeInvFreq,
  silu,
  softmax,
  swiglu,
  topK,
} from "../../src/model/reference_ops.ts";

function close(a: number, b: number, tol = 1e-6): boolean {
  return Math.abs(a - b) <= tol * Math.max(1, Math.abs(b));
}

test("matVec multiplies a row-major [rows, cols] matrix by a vector", () => {
  const w = new Float32Array([1, 2, 3, 4, 5, 6]); // [[1,2,3],[4,5,6]]
  assert.equal([...matVec(w, new Float32Array([1, 0, -1]), 2, 3)], [-2, -2]);
});

test("rmsNorm divides by the root mean square, per group of the weight's length", () => {
  // [3, 4] has rms sqrt(12.5); [0, 2] has rms sqrt(2).
  const y = rmsNorm(new Float32Array([3, 4, 0, 2]), new Float32Array([1, 2]), 0);
  const expected = [3 / Math.sqrt(12.5), 8 / Math.sqrt(12.5), 0, 4 / Math.sqrt(2)];
  y.forEach((v, i) => assert.ok(close(v, expected[i]), `${v} vs ${expected[i]}`));
});

test("RoPE at position 0 is the identity and it preserves each pair's length", () => {
  const inv = ropeInvFreq(10000, 8);
  const x = new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]);
  const at0 = x.slice();
  applyRope(at0, 8, 0, inv);
  assert.equal([...at0], [...x]);
  const at5 = x.slice();
  applyRope(at5, 8, 5, inv);
  for (let i = 0; i < 4; i++) {
    assert.ok(close(Math.hypot(at5[i], at5[i + 4]), Math.hypot(x[i], x[i + 4]), 1e-6));
  }
});

test("RoPE rotates halves: q(m).k(n) depends only on m - n", () => {
  const inv = ropeInvFreq(100, 4);
  const q = new Float32Array([0.3, -1.2, 0.7, 0.5]);
  const k = new Float32Array([1.1, 0.4, -0.6, 0.9]);
  const dot = (m: number, n: number) => {
    const a = q.slice(), b = k.slice();
    applyRope(a, 4, m, inv);
    applyRope(b, 4, n, inv);
    return a.reduce((s, v, i) => s + v * b[i], 0);
  };
  assert.ok(close(dot(7, 3), dot(4, 0), 1e-5));
  assert.ok(close(dot(12, 10), dot(2, 0), 1e-5));
  assert.not.ok(close(dot(4, 0), dot(3, 0), 1e-3), "different distances give different scores");
  // Pair (x[0], x[2]) turns by angle 1 * position: (1, 0) at position 1 -> (cos 1, sin 1).
  const v = new Float32Array([1, 0, 0, 0]);
  applyRope(v, 4, 1, inv);
  assert.ok(close(v[0], Math.cos(1)) && close(v[2], Math.sin(1)));
});

test("inverse frequencies are theta^(-2i/d)", () => {
  const inv = ropeInvFreq(1e6, 16);
  assert.is(inv.length, 8);
  assert.is(inv[0], 1);
  assert.ok(close(inv[1], 1e6 ** (-2 / 16), 1e-6));
});

test("softmax sums to one and is shift invariant", () => {
  const p = softmax([1, 2, 3]);
  assert.ok(close(p.reduce((a, b) => a + b, 0), 1, 1e-12));
  assert.equal(softmax([1001, 1002, 1003]).map((v) => v.toFixed(12)), p.map((v) => v.toFixed(12)));
});

test("topK returns the largest first and breaks ties toward the lower index", () => {
  assert.equal(topK([0.1, 0.4, 0.2, 0.4, 0.3], 3), [1, 3, 4]);
  assert.equal(topK([5, 5, 5, 5], 2), [0, 1]);
});

test("SwiGLU is down(silu(gate x) * up x)", () => {
  assert.ok(close(silu(0), 0) && close(silu(2), 2 / (1 + Math.exp(-2))));
  const x = new Float32Array([1, -1]);
  const gate = new Float32Array([2, 0, 0, 1]); // gate x = [2, -1]
  const up = new Float32Array([1, 1, 3, 0]); // up x = [0, 3]
  const down = new Float32Array([1, 1]); // [1, 2] -> sum
  const y = swiglu(x, gate, up, down, 2, 2);
  assert.ok(close(y[0], silu(2) * 0 + silu(-1) * 3, 1e-6));
});

test.run();
