/**
 * Small inline-SVG chart pieces for the HTML report: escaping, linear and log scales
 * with ticks, axes, a sequential color scale. Output is plain SVG text; no fonts or
 * scripts are fetched.
 *
 * ```ts
 * const x = logScale([1, 4096], [40, 600]);
 * `<svg class="chart">${axisBottom(x, 300, "KV tokens")}</svg>`;
 * ```
 */

/** Escapes text for HTML and SVG. */
export function esc(text: string | number): string {
  return String(text).replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!,
  );
}

/** A scale from data to pixels, with its ticks. */
export interface Scale {
  (v: number): number;
  readonly ticks: readonly number[];
  readonly log: boolean;
  /** The pixel range. */
  readonly range: readonly [number, number];
}

/** Linear scale of `domain` onto `range`, with about five round ticks. */
export function linearScale(
  domain: readonly [number, number],
  range: readonly [number, number],
): Scale {
  let [d0, d1] = domain;
  if (d0 === d1) [d0, d1] = [d0 - 1, d1 + 1];
  const f = ((v: number) => range[0] + ((v - d0) / (d1 - d0)) * (range[1] - range[0])) as Scale;
  const step = niceStep((d1 - d0) / 5);
  const ticks: number[] = [];
  for (let t = Math.ceil(d0 / step) * step; t <= d1 + 1e-9 * step; t += step) {
    ticks.push(+t.toPrecision(12));
  }
  return Object.assign(f, { ticks, log: false, range });
}

/** Log10 scale (domain > 0), ticks at powers of ten (and of two when the span is short). */
export function logScale(
  domain: readonly [number, number],
  range: readonly [number, number],
): Scale {
  let [d0, d1] = domain.map((v) => Math.max(v, 1e-12));
  if (d0 === d1) [d0, d1] = [d0 / 2, d1 * 2];
  const l0 = Math.log10(d0), l1 = Math.log10(d1);
  const f = ((v: number) =>
    range[0] +
    ((Math.log10(Math.max(v, 1e-12)) - l0) / (l1 - l0)) * (range[1] - range[0])) as Scale;
  let ticks: number[] = [];
  for (let e = Math.floor(l0); e <= Math.ceil(l1); e++) {
    const t = 10 ** e;
    if (t >= d0 * 0.999 && t <= d1 * 1.001) ticks.push(t);
  }
  for (const mantissas of [[1, 2, 5], [1, 2, 3, 5, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9]]) {
    if (ticks.length >= 3) break;
    ticks = [];
    for (let e = Math.floor(l0); e <= Math.ceil(l1); e++) {
      for (const m of mantissas) {
        const t = m * 10 ** e;
        if (t >= d0 * 0.999 && t <= d1 * 1.001) ticks.push(+t.toPrecision(6));
      }
    }
  }
  while (ticks.length > 9) ticks = ticks.filter((_, i) => i % 2 === 0);
  return Object.assign(f, { ticks, log: true, range });
}

function niceStep(raw: number): number {
  const p = 10 ** Math.floor(Math.log10(raw));
  const m = raw / p;
  return (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10) * p;
}

/** Short number text: 1.5k, 2M, 0.25. */
export function short(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e6) return `${+(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toPrecision(3)}k`;
  if (a === 0) return "0";
  return String(+v.toPrecision(3));
}

/** Bottom axis at pixel row `y` with ticks and a label. */
export function axisBottom(x: Scale, y: number, label: string): string {
  const [r0, r1] = x.range;
  const ticks = x.ticks.map((t) =>
    `<line x1="${x(t)}" x2="${x(t)}" y1="${y}" y2="${y + 4}" stroke="#555"/>` +
    `<text x="${x(t)}" y="${y + 15}" text-anchor="middle">${esc(short(t))}</text>`
  ).join("");
  return `<g class="axis"><line x1="${Math.min(r0, r1)}" x2="${
    Math.max(r0, r1)
  }" y1="${y}" y2="${y}" stroke="#555"/>${ticks}` +
    `<text class="label" x="${(r0 + r1) / 2}" y="${y + 30}" text-anchor="middle">${
      esc(label)
    }</text></g>`;
}

/** Left axis at pixel column `x` with ticks, grid lines to `width`, and a label. */
export function axisLeft(y: Scale, x: number, width: number, label: string): string {
  const ticks = y.ticks.map((t) =>
    `<line x1="${x - 4}" x2="${x + width}" y1="${y(t)}" y2="${y(t)}" stroke="#ddd"/>` +
    `<text x="${x - 6}" y="${y(t) + 4}" text-anchor="end">${esc(short(t))}</text>`
  ).join("");
  const mid = y.ticks.length ? (y(y.ticks[0]) + y(y.ticks[y.ticks.length - 1])) / 2 : 0;
  return `<g class="axis">${ticks}<text class="label" transform="translate(${
    x - 42
  },${mid}) rotate(-90)" text-anchor="middle">${esc(label)}</text></g>`;
}

const STOPS = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"];

/** Sequential color (viridis stops) for t in [0, 1]. */
export function color(t: number): string {
  const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(x));
  const f = x - i;
  const a = hex(STOPS[i]), b = hex(STOPS[i + 1]);
  return `rgb(${a.map((v, k) => Math.round(v + f * (b[k] - v))).join(",")})`;
}

/** Categorical colors for series. */
export const SERIES_COLORS = [
  "#1f77b4",
  "#d62728",
  "#2ca02c",
  "#ff7f0e",
  "#9467bd",
  "#8c564b",
  "#e377c2",
  "#17becf",
];

function hex(c: string): number[] {
  return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
}
