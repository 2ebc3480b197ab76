/**
 * The benchmark report: one self-contained HTML page (inline SVG, CSS and a few lines of
 * inline JavaScript; nothing is fetched, so it works offline) from one or more artifacts:
 *
 * - run provenance (model, adapter, engine, protocol, coverage, timing);
 * - the decode latency surface: a batch x KV heatmap per kv_seed_regime;
 * - prefill latency against tokens, one series per (batch, KV-read) slice;
 * - fake vs real KV per point: every decode point's wall by regime, and the fake/real
 *   ratio where the same coordinates were measured both ways;
 * - the median-of-N spread of every multi-sample point;
 * - skipped points and their reasons;
 * - the shader timing breakdown of the `profile --json` summaries given (`report --profile`).
 *
 * Every chart is an `<svg class="chart" data-chart="NAME">`.
 *
 * ```ts
 * const html = renderReport([{ name: "bench.json", artifact }]);
 * writeFileSync("report.html", html);
 * ```
 */
import type { BenchArtifact } from "../bench/artifact.ts";
import type { KernelTimingSummary } from "./kernel_timings.ts";
import { median } from "./ladder_interpolation.ts";
import { type LibraryRow, libraryRows } from "./latency_library.ts";
import {
  axisBottom,
  axisLeft,
  color,
  esc,
  linearScale,
  logScale,
  SERIES_COLORS,
  short,
} from "./svg_chart.ts";

/** One artifact and the name it is shown under. */
export interface ReportArtifact {
  readonly name: string;
  readonly artifact: BenchArtifact;
}

/** A kernel timing summary to draw, with its title. */
export interface ReportKernelTimings {
  readonly title: string;
  readonly summary: KernelTimingSummary;
}

/** The report page. */
export function renderReport(
  artifacts: readonly ReportArtifact[],
  options: { readonly kernelTimings?: readonly ReportKernelTimings[]; readonly title?: string } =
    {},
): string {
  if (artifacts.length === 0) throw new Error("renderReport: no artifacts");
  const rows = artifacts.flatMap((a) =>
    libraryRows([a.artifact]).map((r) => ({ ...r, source: a.name }))
  );
  const timings = options.kernelTimings ?? [];
  const title = options.title ??
    `webfpm latency report: ${artifacts.map((a) => a.name).join(", ")}`;
  const sections = [
    section("Run provenance", provenance(artifacts)),
    section("Decode latency surface (batch x KV)", decodeSurface(rows)),
    section("Prefill latency against tokens", prefillChart(rows)),
    section("Fake vs real KV per point", fakeVsReal(rows)),
    section("Median-of-N spread", medianSpread(rows)),
    section("Skipped points", skipped(artifacts)),
    section("Shader timing breakdown", kernelBreakdown(timings)),
  ];
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
<style>${CSS}</style></head>
<body><h1>${esc(title)}</h1>
<p class="note">${rows.length} measured rows from ${artifacts.length} artifact(s). Times are host wall
time per step (end of schedule to output arrival; steady decode: gap between outputs), in ms.</p>
${sections.join("\n")}
<div id="tip" hidden></div>
<script>${SCRIPT}</script>
</body></html>
`;
}

type Row = LibraryRow & { readonly source: string };

function section(title: string, body: string): string {
  return `<section><h2>${esc(title)}</h2>${body}</section>`;
}

function table(header: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  // Wide tables (the provenance of several artifacts) scroll sideways instead of spilling.
  return `<div class="wide"><table><thead><tr>${
    header.map((h) => `<th>${esc(h)}</th>`).join("")
  }</tr></thead><tbody>${
    rows.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join("")}</tr>`).join("")
  }</tbody></table></div>`;
}

function empty(text: string): string {
  return `<p class="empty">${esc(text)}</p>`;
}

const ms = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

function provenance(artifacts: readonly ReportArtifact[]): string {
  const fields: [string, (a: BenchArtifact) => string][] = [
    ["run id", (a) => a.run_id],
    ["status", (a) => `${a.status} (${a.stop_reason}); valid ${a.valid}, usable ${a.usable}`],
    ["rank", (a) => `${a.rank} of ${a.dp_size}`],
    ["mode", (a) => a.mode],
    [
      "model",
      (a) =>
        a.engine
          ? `${a.engine.model} (${a.engine.architecture}, ${a.engine.dtype}, ${a.engine.num_layers} layers)`
          : "-",
    ],
    [
      "adapter",
      (a) =>
        a.engine?.adapter
          ? `${a.engine.adapter.description} [${a.engine.adapter.backend}, ${a.engine.adapter.type}]`
          : "-",
    ],
    ["runtime", (a) => a.engine ? `${a.engine.runtime}, webfpm ${a.engine.webfpm_version}` : "-"],
    [
      "engine",
      (a) =>
        a.capacity
          ? `block ${a.capacity.block_size}, ${a.capacity.blocks_total} blocks, max_model_len ${a.capacity.max_model_len}, ${a.capacity.max_num_seqs} seqs, ${a.capacity.max_batched_tokens} tokens/step, prefix caching ${a.capacity.prefix_caching}`
          : "-",
    ],
    [
      "points",
      (a) =>
        a.points_source
          ? (a.points_source.kind === "manifest"
            ? `manifest ${a.points_source.path}`
            : `generated (${a.points_source.preset})`)
          : "-",
    ],
    ["grid digest", (a) => a.grid_digest ?? "-"],
    [
      "coverage",
      (a) =>
        `${a.coverage.points_measured} measured, ${a.coverage.points_skipped} skipped, ${a.coverage.points_not_run} not run of ${a.coverage.points_planned}`,
    ],
    [
      "regimes",
      (a) => Object.entries(a.coverage.regimes).map(([k, v]) => `${k}: ${v}`).join(", ") || "-",
    ],
    [
      "content",
      (a) =>
        `${a.synthetic_prompts.mode}${
          a.synthetic_prompts.zeros_fallback ? " (zeros fallback)" : ""
        }, seed ${a.measurement_protocol.content_seed}`,
    ],
    [
      "kvwarm",
      (a) =>
        a.kvwarm.enabled
          ? `on: ${a.kvwarm.points_real_kv} real-KV points, ${a.kvwarm.points_fake_fallback} fake fallback`
          : `off (${a.kvwarm.skip_reason ?? a.kvwarm.requested})`,
    ],
    [
      "timing",
      (a) =>
        `${a.timing.elapsed.toFixed(1)} s, ${a.timing.points_per_minute.toFixed(1)} points/min, ${
          (100 * a.timing.outside_measured_share).toFixed(1)
        }% outside measured steps`,
    ],
    [
      "protocol",
      (a) =>
        `${a.measurement_protocol.timing_metric}; decode ${a.measurement_policy.decode}, prefill ${a.measurement_policy.prefill}; median ${a.measurement_protocol.median.method} of ${a.measurement_protocol.median.repeats}; GC ${a.measurement_protocol.gc.policy}`,
    ],
    ["when", (a) => `${a.timing.started_at} .. ${a.timing.finished_at}`],
    ["error", (a) => a.error ? `${a.error.kind}: ${a.error.message}` : "none"],
  ];
  return table(
    ["", ...artifacts.map((a) => a.name)],
    fields.map(([k, f]) => [k, ...artifacts.map((a) => f(a.artifact))]),
  );
}

function decodeSurface(rows: readonly Row[]): string {
  const decode = rows.filter((r) => r.kind === "decode");
  if (decode.length === 0) return empty("No decode points in these artifacts.");
  const walls = decode.map((r) => r.wallMs);
  const lo = Math.log(Math.min(...walls)), hi = Math.log(Math.max(...walls));
  const tone = (v: number) => (hi > lo ? (Math.log(v) - lo) / (hi - lo) : 0.5);
  const regimes = [...new Set(decode.map((r) => r.regime))].sort();
  const legend =
    `<svg class="legend" width="320" height="34" viewBox="0 0 320 34"><defs><linearGradient id="ramp">${
      [0, 0.25, 0.5, 0.75, 1].map((t) => `<stop offset="${t}" stop-color="${color(t)}"/>`).join("")
    }</linearGradient></defs><rect x="10" y="4" width="300" height="12" fill="url(#ramp)"/><text x="10" y="30">${
      ms(Math.exp(lo))
    } ms</text><text x="310" y="30" text-anchor="end">${
      ms(Math.exp(hi))
    } ms (log color)</text></svg>`;
  const charts = regimes.map((regime) => {
    const rs = decode.filter((r) => r.regime === regime);
    const batches = [...new Set(rs.map((r) => r.batch))].sort((a, b) => a - b);
    const bins = [...new Set(rs.map((r) => Math.floor(Math.log2(r.kv))))].sort((a, b) => a - b);
    const cw = Math.max(34, Math.min(70, 760 / bins.length)),
      ch = Math.max(18, Math.min(34, 420 / batches.length));
    const left = 60, top = 10, w = left + cw * bins.length + 10, h = top + ch * batches.length + 46;
    const cells: string[] = [];
    for (const [bi, b] of batches.entries()) {
      for (const [ki, bin] of bins.entries()) {
        const here = rs.filter((r) => r.batch === b && Math.floor(Math.log2(r.kv)) === bin);
        if (here.length === 0) continue;
        const v = median(here.map((r) => r.wallMs));
        const x = left + ki * cw, y = top + (batches.length - 1 - bi) * ch;
        const tip = `${regime}: batch ${b}, KV ${here.map((r) => r.kv).join(", ")}: ${ms(v)} ms`;
        cells.push(
          `<rect x="${x}" y="${y}" width="${cw - 1}" height="${ch - 1}" fill="${
            color(tone(v))
          }" data-tip="${esc(tip)}"><title>${esc(tip)}</title></rect>` +
            (cw >= 40 && ch >= 16
              ? `<text x="${x + cw / 2}" y="${
                y + ch / 2 + 4
              }" text-anchor="middle" class="cell" fill="${tone(v) > 0.6 ? "#000" : "#fff"}">${
                ms(v)
              }</text>`
              : ""),
        );
      }
    }
    const yLabels = batches.map((b, bi) =>
      `<text x="${left - 6}" y="${
        top + (batches.length - 1 - bi) * ch + ch / 2 + 4
      }" text-anchor="end">${b}</text>`
    ).join("");
    const xLabels = bins.map((bin, ki) =>
      `<text x="${left + ki * cw + cw / 2}" y="${
        top + ch * batches.length + 14
      }" text-anchor="middle">${short(2 ** bin)}</text>`
    ).join("");
    return `<figure><figcaption>${
      esc(regime)
    } (${rs.length} points)</figcaption><svg class="chart" data-chart="decode-surface-${
      esc(regime)
    }" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">${
      cells.join("")
    }${yLabels}${xLabels}<text class="label" x="${left + (cw * bins.length) / 2}" y="${
      h - 6
    }" text-anchor="middle">total KV tokens (bin from)</text><text class="label" transform="translate(14,${
      top + (ch * batches.length) / 2
    }) rotate(-90)" text-anchor="middle">batch</text></svg></figure>`;
  });
  return `<p class="note">Cell: median wall of the decode points whose total KV falls in [2^k, 2^(k+1)); rows are batch sizes.</p>${legend}<div class="grid">${
    charts.join("")
  }</div>`;
}

/** A scatter/line chart of series on log-log (or log-linear) axes. */
function seriesChart(
  name: string,
  series: readonly {
    label: string;
    points: readonly { x: number; y: number; tip: string }[];
    line?: boolean;
  }[],
  axes: { x: string; y: string; yLog?: boolean; yRef?: number },
): string {
  const all = series.flatMap((s) => s.points);
  const W = 720, H = 340, L = 70, R = 170, T = 14, B = 44;
  const x = logScale(
    [Math.min(...all.map((p) => p.x)) / 1.1, Math.max(...all.map((p) => p.x)) * 1.1],
    [L, W - R],
  );
  const ys = all.map((p) => p.y).concat(axes.yRef === undefined ? [] : [axes.yRef]);
  // Linear: the data's own range (ratios near 1 would be a flat line on an axis from 0).
  const pad = Math.max(0.01, 0.08 * (Math.max(...ys) - Math.min(...ys)));
  const y = axes.yLog === false
    ? linearScale([Math.min(...ys) - pad, Math.max(...ys) + pad], [H - B, T])
    : logScale([Math.min(...ys) / 1.15, Math.max(...ys) * 1.15], [H - B, T]);
  const parts: string[] = [axisLeft(y, L, W - R - L, axes.y), axisBottom(x, H - B, axes.x)];
  if (axes.yRef !== undefined) {
    parts.push(
      `<line x1="${L}" x2="${W - R}" y1="${y(axes.yRef)}" y2="${
        y(axes.yRef)
      }" stroke="#333" stroke-dasharray="4 3"/>`,
    );
  }
  series.forEach((s, i) => {
    const c = SERIES_COLORS[i % SERIES_COLORS.length];
    const pts = [...s.points].sort((a, b) => a.x - b.x);
    if (s.line !== false && pts.length > 1) {
      parts.push(
        `<polyline fill="none" stroke="${c}" stroke-width="1.5" points="${
          pts.map((p) => `${x(p.x).toFixed(1)},${y(p.y).toFixed(1)}`).join(" ")
        }"/>`,
      );
    }
    for (const p of pts) {
      parts.push(
        `<circle cx="${x(p.x).toFixed(1)}" cy="${
          y(p.y).toFixed(1)
        }" r="3.5" fill="${c}" data-tip="${esc(p.tip)}"><title>${esc(p.tip)}</title></circle>`,
      );
    }
    parts.push(
      `<rect x="${W - R + 12}" y="${T + i * 18}" width="10" height="10" fill="${c}"/><text x="${
        W - R + 26
      }" y="${T + i * 18 + 9}">${esc(s.label)}</text>`,
    );
  });
  return `<svg class="chart" data-chart="${
    esc(name)
  }" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">${parts.join("")}</svg>`;
}

function prefillChart(rows: readonly Row[]): string {
  const prefill = rows.filter((r) => r.kind === "prefill");
  if (prefill.length === 0) return empty("No prefill points in these artifacts.");
  const groups = new Map<string, Row[]>();
  for (const r of prefill) {
    const k = `${r.batch} ${r.kv} ${r.regime}`;
    groups.set(k, [...(groups.get(k) ?? []), r]);
  }
  // a slice's label rounds its KV tokens; slices whose rounded labels meet keep exact ones
  const rounded = (r: Row) => `B=${r.batch} KV=${short(r.kv)} ${r.regime}`;
  const seen = new Map<string, number>();
  for (const [r] of groups.values()) seen.set(rounded(r), (seen.get(rounded(r)) ?? 0) + 1);
  const series = [...groups.values()].slice(0, 8).map((rs) => {
    const r = rs[0];
    const label = seen.get(rounded(r))! > 1 ? `B=${r.batch} KV=${r.kv} ${r.regime}` : rounded(r);
    return {
      label,
      points: rs.map((r) => ({
        x: r.tokens,
        y: r.wallMs,
        tip: `${label}: ${r.tokens} tokens, ${ms(r.wallMs)} ms (${r.source})`,
      })),
    };
  });
  const note = groups.size > 8
    ? `<p class="note">Showing 8 of ${groups.size} (batch, KV-read) slices.</p>`
    : "";
  return seriesChart("prefill-latency", series, { x: "prefill tokens in the step", y: "wall ms" }) +
    note;
}

function fakeVsReal(rows: readonly Row[]): string {
  const decode = rows.filter((r) => r.kind === "decode");
  if (decode.length === 0) return empty("No decode points in these artifacts.");
  const regimes = [...new Set(decode.map((r) => r.regime))].sort();
  const byRegime = seriesChart(
    "decode-by-regime",
    regimes.map((regime) => ({
      label: regime,
      line: false,
      points: decode.filter((r) => r.regime === regime).map((r) => ({
        x: r.kv,
        y: r.wallMs,
        tip: `${regime}: batch ${r.batch}, KV ${r.kv}: ${ms(r.wallMs)} ms`,
      })),
    })),
    { x: "total KV tokens", y: "decode wall ms" },
  );
  const real = new Map<string, Row[]>();
  for (const r of decode.filter((r) => r.regime === "real_kv")) {
    real.set(`${r.batch}:${r.kv}`, [...(real.get(`${r.batch}:${r.kv}`) ?? []), r]);
  }
  const pairs = decode.filter((r) => r.regime === "fake_fallback" || r.regime === "legacy")
    .filter((r) => real.has(`${r.batch}:${r.kv}`))
    .map((f) => {
      const reals = real.get(`${f.batch}:${f.kv}`)!;
      const rv = median(reals.map((r) => r.wallMs));
      return {
        batch: f.batch,
        kv: f.kv,
        fake: f.wallMs,
        real: rv,
        ratio: f.wallMs / rv,
        regime: f.regime,
        fakeFrom: f.source,
        realFrom: [...new Set(reals.map((r) => r.source))].join(", "),
      };
    });
  let ratio =
    `<p class="note">No coordinate was measured both on real KV and on fake KV; compare the regimes above.</p>`;
  if (pairs.length) {
    const batches = [...new Set(pairs.map((p) => p.batch))].sort((a, b) => a - b);
    ratio = seriesChart(
      "fake-real-ratio",
      batches.slice(0, 8).map((b) => ({
        label: `batch ${b}`,
        points: pairs.filter((p) => p.batch === b).map((p) => ({
          x: p.kv,
          y: p.ratio,
          tip: `batch ${b}, KV ${p.kv}: fake ${ms(p.fake)} / real ${ms(p.real)} ms = ${
            p.ratio.toFixed(3)
          }`,
        })),
      })),
      { x: "total KV tokens", y: "fake / real wall", yLog: false, yRef: 1 },
    ) + (batches.length > 8
      ? `<p class="note">The chart shows batches ${
        batches.slice(0, 8).join(", ")
      } of ${batches.length}; the table lists every pair.</p>`
      : "") +
      table(
        [
          "batch",
          "KV tokens",
          "real ms (median)",
          "fake ms",
          "fake regime",
          "fake / real",
          "fake from",
          "real from",
        ],
        pairs.map((p) => [
          p.batch,
          p.kv,
          ms(p.real),
          ms(p.fake),
          p.regime,
          p.ratio.toFixed(3),
          p.fakeFrom,
          p.realFrom,
        ]),
      );
  }
  return byRegime + ratio;
}

function medianSpread(rows: readonly Row[]): string {
  const multi = rows.filter((r) => r.sampleWallsMs.length > 1)
    .map((r) => {
      const rel = r.sampleWallsMs.map((w) => (100 * (w - r.wallMs)) / r.wallMs);
      return {
        r,
        rel,
        spread: (100 * (Math.max(...r.sampleWallsMs) - Math.min(...r.sampleWallsMs))) / r.wallMs,
      };
    })
    .sort((a, b) => a.r.kv - b.r.kv || a.r.batch - b.r.batch);
  if (multi.length === 0) return empty("No point has more than one timed sample.");
  const W = 720, H = 300, L = 70, T = 14, B = 44, R = 20;
  const x = linearScale([0, Math.max(1, multi.length - 1)], [L + 10, W - R - 10]);
  const vals = multi.flatMap((m) => m.rel);
  const y = linearScale([Math.min(-1, ...vals), Math.max(1, ...vals)], [H - B, T]);
  const marks = multi.map((m, i) => {
    const tip = `${m.r.kind} ${m.r.pointKey} (${m.r.regime}): samples ${
      m.r.sampleWallsMs.map(ms).join(", ")
    } ms, estimate ${ms(m.r.wallMs)} ms, spread ${m.spread.toFixed(1)}%`;
    return `<line x1="${x(i)}" x2="${x(i)}" y1="${y(Math.min(...m.rel))}" y2="${
      y(Math.max(...m.rel))
    }" stroke="#888"/>` +
      m.rel.map((v) =>
        `<circle cx="${x(i)}" cy="${y(v)}" r="3" fill="${
          v === 0 ? "#d62728" : "#1f77b4"
        }" data-tip="${esc(tip)}"><title>${esc(tip)}</title></circle>`
      ).join("");
  }).join("");
  const chart =
    `<svg class="chart" data-chart="median-spread" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">${
      axisLeft(y, L, W - L - R, "sample vs estimate, %")
    }<line x1="${L}" x2="${W - R}" y1="${y(0)}" y2="${
      y(0)
    }" stroke="#333"/>${marks}<text class="label" x="${W / 2}" y="${
      H - 12
    }" text-anchor="middle">points with several samples, by total KV (red: the chosen sample)</text></svg>`;
  const worst = [...multi].sort((a, b) => b.spread - a.spread).slice(0, 10);
  return chart + table(
    ["point", "regime", "median of", "samples ms", "estimate ms", "spread %"],
    worst.map((
      m,
    ) => [
      m.r.pointKey,
      m.r.regime,
      m.r.medianOf,
      m.r.sampleWallsMs.map(ms).join(", "),
      ms(m.r.wallMs),
      m.spread.toFixed(2),
    ]),
  );
}

function skipped(artifacts: readonly ReportArtifact[]): string {
  const all = artifacts.flatMap((a) =>
    a.artifact.skipped_points.map((s) => ({ ...s, source: a.name }))
  );
  if (all.length === 0) return empty("No point was skipped.");
  const counts = new Map<string, number>();
  for (const s of all) {
    const reason = s.reason.split(":")[0];
    counts.set(reason, (counts.get(reason) ?? 0) + 1);
  }
  return `<p>${
    [...counts].map(([r, n]) => `<span class="pill">${esc(r)}: ${n}</span>`).join(" ")
  }</p>` + table(
    ["artifact", "id", "point", "regime", "reason"],
    all.map((s) => [s.source, s.benchmark_id, s.point_key, s.kv_seed_regime, s.reason]),
  );
}

function kernelBreakdown(timings: readonly ReportKernelTimings[]): string {
  if (timings.length === 0) {
    return empty(
      "No kernel timings given (run deno task profile --json FILE for a step shape and " +
        "pass the files to report --profile).",
    );
  }
  const labels = [...new Set(timings.flatMap((t) => t.summary.rows.map((r) => r.label)))];
  const totals = new Map(
    labels.map((l) => [
      l,
      timings.reduce((s, t) => s + (t.summary.rows.find((r) => r.label === l)?.share ?? 0), 0),
    ]),
  );
  labels.sort((a, b) => totals.get(b)! - totals.get(a)!);
  const W = 800, L = 280, R = 20, bar = 22, T = 10;
  const H = T + timings.length * (bar + 8) + 30 + Math.ceil(labels.length / 3) * 18;
  const x = linearScale([0, 1], [L, W - R]);
  const colorOf = (l: string) => SERIES_COLORS[labels.indexOf(l) % SERIES_COLORS.length];
  const bars = timings.map((t, i) => {
    let at = 0;
    const y0 = T + i * (bar + 8);
    const segs = [...t.summary.rows].sort((a, b) =>
      labels.indexOf(a.label) - labels.indexOf(b.label)
    ).map((r) => {
      const tip = `${t.title}: ${r.label} ${r.us.toFixed(1)} µs (${(100 * r.share).toFixed(1)}%)` +
        (r.gb_per_s !== null ? `, ${r.gb_per_s.toFixed(0)} GB/s` : "") +
        (r.roof_pct !== null ? `, ${r.roof_pct.toFixed(0)}% of roof` : "");
      const s = `<rect x="${x(at)}" y="${y0}" width="${
        Math.max(0.5, x(at + r.share) - x(at))
      }" height="${bar}" fill="${colorOf(r.label)}" data-tip="${esc(tip)}"><title>${
        esc(tip)
      }</title></rect>`;
      at += r.share;
      return s;
    }).join("");
    return `<text x="${L - 6}" y="${y0 + bar / 2 + 4}" text-anchor="end">${
      esc(t.title.length > 30 ? t.title.slice(0, 29) + "…" : t.title)
    } (${(t.summary.step_us / 1000).toFixed(2)} ms)</text>${segs}`;
  }).join("");
  const ly = T + timings.length * (bar + 8) + 14;
  const legend = labels.map((l, i) =>
    `<rect x="${L + (i % 3) * 180}" y="${
      ly + Math.floor(i / 3) * 18
    }" width="10" height="10" fill="${colorOf(l)}"/><text x="${L + (i % 3) * 180 + 14}" y="${
      ly + Math.floor(i / 3) * 18 + 9
    }">${esc(l)}</text>`
  ).join("");
  const detail = timings.map((t) =>
    `<details><summary>${esc(t.title)}: ${t.summary.steps} step(s), ${
      t.summary.step_us.toFixed(1)
    } µs GPU, roof ${
      t.summary.bandwidth_gbps === null ? "-" : t.summary.bandwidth_gbps.toFixed(0) + " GB/s"
    }</summary>${
      table(
        ["kernel", "calls", "µs", "share %", "MB", "GB/s", "% roof", "TFLOP/s"],
        t.summary.rows.map((r) => [
          r.label,
          r.calls,
          r.us.toFixed(1),
          (100 * r.share).toFixed(1),
          r.bytes === null ? "-" : (r.bytes / 1e6).toFixed(2),
          r.gb_per_s === null ? "-" : r.gb_per_s.toFixed(1),
          r.roof_pct === null ? "-" : r.roof_pct.toFixed(1),
          r.tflop_per_s === null ? "-" : r.tflop_per_s.toFixed(3),
        ]),
      )
    }</details>`
  ).join("");
  return `<svg class="chart" data-chart="kernel-breakdown" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">${bars}${legend}</svg>${detail}`;
}

const CSS = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1180px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
.wide{overflow-x:auto;max-width:100%}table{border-collapse:collapse;margin:8px 0;font-size:12.5px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4}svg{font-size:11px;background:#fff}svg .label{font-size:12px;fill:#333}svg text.cell{font-size:10px;pointer-events:none}
.grid{display:flex;flex-wrap:wrap;gap:16px}figure{margin:0}figcaption{font-weight:600;margin:4px 0}
.note{color:#555}.empty{color:#777;font-style:italic}.pill{display:inline-block;background:#eef;border-radius:9px;padding:1px 8px;margin:2px}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:4px 8px;border-radius:4px;font-size:12px;max-width:420px;z-index:9}
details{margin:4px 0}`;

const SCRIPT = `
(function () {
  var tip = document.getElementById("tip");
  document.addEventListener("mousemove", function (e) {
    var t = e.target && e.target.getAttribute ? e.target.getAttribute("data-tip") : null;
    if (!t) { tip.hidden = true; return; }
    tip.textContent = t;
    tip.hidden = false;
    tip.style.left = (e.clientX + 12) + "px";
    tip.style.top = (e.clientY + 12) + "px";
  });
  var charts = document.querySelectorAll("svg.chart");
  document.body.setAttribute("data-charts", String(charts.length));
})();`;
