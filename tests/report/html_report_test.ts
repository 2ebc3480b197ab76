import { test } from "uvu";
import * as assert from "uvu/assert";
import { renderReport } from "../../src/report/html_report.ts";
import { syntheticArtifact } from "./synthetic_artifact.ts";
import { reportArtifacts } from "./report_fixture.ts";

test("the page is self-contained: no external script, stylesheet, font, image or URL", () => {
  const html = renderReport(reportArtifacts());
  assert.not.match(html, /<script[^>]+src=/i);
  assert.not.match(html, /<link\b/i);
  assert.not.match(html, /@import|@font-face|url\((?!#)/i); // url(#id) is an in-page reference
  assert.not.match(html, /https?:\/\//i);
  assert.not.match(html, /<img\b/i);
});

test("every section has its chart: a surface per regime, prefill, regimes, fake/real ratio, spread, kernels", () => {
  const html = renderReport(reportArtifacts());
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
  assert.match(html, /No kernel timings recorded/);
  assert.throws(() => renderReport([]), /no artifacts/);
});

test.run();
