import { test } from "uvu";
import * as assert from "uvu/assert";
import { renderReport } from "../../src/report/html_report.ts";
import type { BenchArtifact } from "../../src/bench/artifact.ts";
import { libraryRows } from "../../src/report/latency_library.ts";
import {
  decodePoint,
  prefillPoint,
  syntheticArtifact,
  type SyntheticRow,
} from "./synthetic_artifact.ts";
import { reportArtifacts, reportTimings } from "./report_fixture.ts";

test("the page is self-contained: no external script, stylesheet, font, image or URL", () => {
  const html = renderReport(reportArtifacts(), { kernelTimings: reportTimings() });
  assert.not.match(html, /<script[^>]+src=/i);
  assert.not.match(html, /<link\b/i);
  assert.not.match(html, /@import|@font-face|url\((?!#)/i); // url(#id) is an in-page reference
  assert.not.match(html, /https?:\/\//i);
  assert.not.match(html, /<img\b/i);
});

test("every section has its chart: a surface per regime, prefill, regimes, fake/real ratio, spread, kernels", () => {
  const html = renderReport(reportArtifacts(), { kernelTimings: reportTimings() });
  const charts = [...html.matchAll(/<svg class="chart" data-chart="([^"]+)"/g)].map((m) => m[1]);
  assert.equal(charts.sort(), [
    "decode-by-regime",
    "decode-surface-legacy",
    "decode-surface-real_kv",
    "fake-real-ratio",
    "kernel-breakdown",
    "median-spread",
    "prefill-latency",
  ]);
  assert.match(html, /capacity: 1<\/span>/);
  assert.match(html, /fake_prefix_miss: 3 of 128 blocks evicted/);
  assert.match(html, /real-run/);
  // decode:8 at 2048 per request: fake/real = 1 + 16384/40000
  assert.match(
    html,
    /<td>8<\/td><td>16384<\/td><td>[^<]+<\/td><td>[^<]+<\/td><td>legacy<\/td><td>1\.410<\/td>/,
  );
});

test("sections without data say so instead of drawing an empty chart", () => {
  const html = renderReport([{ name: "empty.json", artifact: syntheticArtifact([]) }]);
  assert.not.match(html, /class="chart"/);
  assert.match(html, /No decode points/);
  assert.match(html, /No kernel timings given/);
  assert.throws(() => renderReport([]), /no artifacts/);
});

/** A single-rank artifact turned into rank 0's artifact of a 2-rank group. */
function groupArtifact(): BenchArtifact {
  const a = syntheticArtifact([
    { point: decodePoint(4, 4096), regime: "real_kv", walls: [0.010, 0.011, 0.012] },
  ]);
  // The other rank was slower: per sample the group's wall is the slower rank's.
  const groupWalls = [0.0125, 0.0135, 0.0145];
  return {
    ...a,
    dp_size: 2,
    iteration_groups: [{
      ...a.iteration_groups[0],
      ranks: 2,
      iteration_walls: groupWalls,
      wall_time: 0.0135,
    }],
  };
}

test("a group point's median-of-N spread shows the group's samples around the group's estimate", () => {
  const [row] = libraryRows([groupArtifact()]);
  assert.is(row.wallMs, 13.5);
  // The estimate is the upper median of its samples, so the samples shown must contain it.
  assert.ok(
    row.sampleWallsMs.some((s) => Math.abs(s - row.wallMs) < 1e-9),
    `estimate ${row.wallMs} ms is not one of the samples ${row.sampleWallsMs.join(", ")} ms`,
  );
  const html = renderReport([{ name: "dp.json", artifact: groupArtifact() }]);
  // The spread chart marks the chosen sample red; with rank 0's samples against the group's
  // estimate there is none, and every sample reads 7-26% below the estimate.
  const spread = /data-chart="median-spread"[\s\S]*?<\/svg>/.exec(html)![0];
  assert.match(spread, /fill="#d62728"/, "no sample is marked as the chosen one");
});

test("a fake/real ratio chart of more than eight batches says which it shows", () => {
  const r: SyntheticRow[] = [];
  const batches = [1, 2, 4, 8, 16, 32, 64, 128, 256];
  for (const b of batches) {
    r.push({ point: decodePoint(b, b * 64), regime: "real_kv", walls: [0.010] });
    r.push({ point: decodePoint(b, b * 64), regime: "fake_fallback", walls: [0.011] });
  }
  const html = renderReport([{ name: "a.json", artifact: syntheticArtifact(r) }]);
  const ratio = /data-chart="fake-real-ratio"[\s\S]*?<\/svg>(<p class="note">[^<]*<\/p>)?/.exec(
    html,
  )![0];
  const drawn = [...ratio.matchAll(/>batch (\d+)<\/text>/g)].map((m) => Number(m[1]));
  assert.equal(drawn, batches.slice(0, 8));
  assert.match(ratio, /The chart shows batches 1, 2, 4, 8, 16, 32, 64, 128 of 9; the table lists/);
});

test("prefill slices whose KV totals round alike are separate series, labelled exactly", () => {
  // The KV-read axis is {0, B, powers of two, max} in blocks: 2048 blocks and a max of 2050
  // (block 16) are 32768 and 32800 tokens, both "32.8k" in short().
  const r: SyntheticRow[] = [];
  for (const k of [32768, 32800]) {
    for (const t of [64, 256, 1024]) {
      r.push({
        point: prefillPoint(1, t, k),
        regime: "fake_prefix",
        walls: [(4 + 0.01 * t + k / 1000) / 1000],
      });
    }
  }
  const html = renderReport([{ name: "a.json", artifact: syntheticArtifact(r) }]);
  const chart = /data-chart="prefill-latency"[\s\S]*?<\/svg>/.exec(html)![0];
  const lines = [...chart.matchAll(/<polyline /g)].length;
  assert.is(lines, 2, `${lines} series for two KV slices (32768 and 32800 tokens)`);
  assert.match(chart, /KV=32768 fake_prefix/);
  assert.match(chart, /KV=32800 fake_prefix/);
});

test.run();
