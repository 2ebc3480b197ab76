/**
 * Interpolation on a "ladder" grid: rows grouped by an outer coordinate (decode: batch
 * size), each group a ladder of inner coordinates (decode: KV tokens per request) that
 * need not match between groups, as the generated decode grid's per-batch KV ladders do
 * not. A query is interpolated linearly along the ladders of the two groups that bracket
 * its outer coordinate, then linearly between them: bilinear where the grid is
 * rectangular. Nothing is extrapolated: a query outside a bracketing ladder's range, or
 * outside the outer range, is refused with the reason.
 *
 * ```ts
 * const grid = new LadderGrid([{ outer: 1, inner: 128, value: 4.1 }, ...]);
 * const v = grid.at(3, 700); // { value } or { outside: "..." }
 * ```
 */

/** One grid value. */
export interface LadderPoint {
  readonly outer: number;
  readonly inner: number;
  readonly value: number;
}

/** A value, or why there is none. */
export type LadderValue = { readonly value: number } | { readonly outside: string };

/** The grid; duplicate coordinates are merged by their median. */
export class LadderGrid {
  /** Outer values, ascending. */
  readonly outers: readonly number[];
  private readonly ladders: Map<number, { inner: number[]; value: number[] }>;

  constructor(points: readonly LadderPoint[], readonly names = { outer: "outer", inner: "inner" }) {
    const groups = new Map<number, Map<number, number[]>>();
    for (const p of points) {
      if (![p.outer, p.inner, p.value].every(Number.isFinite)) {
        throw new Error("LadderGrid: a non-finite coordinate or value");
      }
      const g = groups.get(p.outer) ?? new Map<number, number[]>();
      const vals = g.get(p.inner) ?? [];
      vals.push(p.value);
      g.set(p.inner, vals);
      groups.set(p.outer, g);
    }
    this.ladders = new Map();
    for (const [outer, g] of groups) {
      const inner = [...g.keys()].sort((a, b) => a - b);
      this.ladders.set(outer, { inner, value: inner.map((i) => median(g.get(i)!)) });
    }
    this.outers = [...this.ladders.keys()].sort((a, b) => a - b);
  }

  /** Number of distinct grid coordinates. */
  get size(): number {
    let n = 0;
    for (const l of this.ladders.values()) n += l.inner.length;
    return n;
  }

  /** The inner range of the ladder at `outer` (undefined when there is none). */
  range(outer: number): readonly [number, number] | undefined {
    const l = this.ladders.get(outer);
    return l ? [l.inner[0], l.inner[l.inner.length - 1]] : undefined;
  }

  /** The interpolated value at (outer, inner), or why there is none. */
  at(outer: number, inner: number): LadderValue {
    const o = this.outers;
    const on = this.names.outer;
    if (o.length === 0) return { outside: "the grid is empty" };
    if (outer < o[0] || outer > o[o.length - 1]) {
      return {
        outside: `${on} ${outer} is outside the collected ${on} range [${o[0]}, ${
          o[o.length - 1]
        }]`,
      };
    }
    if (this.ladders.has(outer)) return this.along(outer, inner);
    const hi = o.findIndex((x) => x > outer);
    const lo = hi - 1;
    const a = this.along(o[lo], inner);
    if ("outside" in a) return a;
    const b = this.along(o[hi], inner);
    if ("outside" in b) return b;
    const t = (outer - o[lo]) / (o[hi] - o[lo]);
    return { value: a.value + t * (b.value - a.value) };
  }

  private along(outer: number, inner: number): LadderValue {
    const l = this.ladders.get(outer)!;
    const xs = l.inner;
    const { outer: on, inner: inn } = this.names;
    if (inner < xs[0] || inner > xs[xs.length - 1]) {
      return {
        outside: `${inn} ${fmt(inner)} is outside the collected range [${fmt(xs[0])}, ${
          fmt(xs[xs.length - 1])
        }] at ${on} ${outer}`,
      };
    }
    const hi = xs.findIndex((x) => x >= inner);
    if (xs[hi] === inner) return { value: l.value[hi] };
    const t = (inner - xs[hi - 1]) / (xs[hi] - xs[hi - 1]);
    return { value: l.value[hi - 1] + t * (l.value[hi] - l.value[hi - 1]) };
  }
}

/** Median (the mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new Error("median of nothing");
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function fmt(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(2);
}
