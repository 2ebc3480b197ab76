/**
 * The report in a real browser (Debian's headless Chromium through playwright-core):
 * it loads from a file with no console error and no request leaving the page, every
 * chart has drawn marks with a visible size, and a screenshot is written.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { existsSync, mkdtempSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { renderReport } from "../../src/report/html_report.ts";
import { CHROMIUM_PATH, withChromium } from "./chromium.ts";
import { reportArtifacts, reportTimings } from "./report_fixture.ts";

test("the report loads offline without console errors, every chart renders, a screenshot is written", async () => {
  assert.ok(
    existsSync(CHROMIUM_PATH),
    `${CHROMIUM_PATH} is missing: run scripts/setup (it installs chromium)`,
  );
  const dir = mkdtempSync(join(tmpdir(), "webfpm-report-"));
  const page = join(dir, "report.html");
  writeFileSync(page, renderReport(reportArtifacts(), { kernelTimings: reportTimings() }));
  const shot = join(dir, "report.png");
  await withChromium(async (context) => {
    const tab = await context.newPage();
    const errors: string[] = [];
    const requests: string[] = [];
    tab.on("console", (m) => {
      if (m.type() === "error" || m.type() === "warning") errors.push(`${m.type()}: ${m.text()}`);
    });
    tab.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
    tab.on("request", (r) => {
      if (!r.url().startsWith("file://")) requests.push(r.url());
    });
    await tab.goto("file://" + page, { waitUntil: "load" });
    const charts = await tab.$$eval("svg.chart", (svgs) =>
      svgs.map((s) => {
        const box = s.getBoundingClientRect();
        return {
          name: s.getAttribute("data-chart"),
          marks: s.querySelectorAll("rect,circle,polyline,line").length,
          width: box.width,
          height: box.height,
        };
      }));
    assert.equal(
      await tab.getAttribute("body", "data-charts"),
      String(charts.length),
      "the inline script ran",
    );
    assert.equal(charts.length, 7);
    for (const c of charts) {
      assert.ok(
        c.marks > 0 && c.width > 100 && c.height > 50,
        `chart ${c.name}: ${JSON.stringify(c)}`,
      );
    }
    // hovering a heatmap cell shows its tooltip
    await tab.hover('svg[data-chart="decode-surface-real_kv"] rect[data-tip]');
    assert.match(await tab.textContent("#tip") ?? "", /real_kv: batch \d+/);
    await tab.screenshot({ path: shot, fullPage: true });
    assert.equal(errors, []);
    assert.equal(requests, []);
  });
  assert.ok(statSync(shot).size > 10_000, "the screenshot has content");
  console.log(`  report screenshot: ${shot}`);
});

test.run();
