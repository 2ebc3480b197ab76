import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  axisBottom,
  color,
  esc,
  linearScale,
  logScale,
  short,
} from "../../src/report/svg_chart.ts";

test("scales map their domain onto the pixel range with round ticks inside it", () => {
  const x = linearScale([0, 10], [100, 200]);
  assert.equal([x(0), x(5), x(10)], [100, 150, 200]);
  assert.equal(x.ticks, [0, 2, 4, 6, 8, 10]);
  const l = logScale([1, 1000], [0, 300]);
  assert.equal([l(1), l(10), l(1000)], [0, 100, 300]);
  assert.equal(l.ticks, [1, 10, 100, 1000]);
  // a short log span falls back to 1-2-5, then 1-2-3-5-7 ticks
  assert.equal(logScale([15, 50], [0, 1]).ticks, [20, 30, 50]);
  assert.ok(logScale([4.6, 14], [0, 1]).ticks.length >= 3);
});

test("axes span the whole range, labels are escaped, colors run dark to light", () => {
  const svg = axisBottom(linearScale([3, 17], [40, 400]), 300, "a < b");
  assert.match(svg, /x1="40" x2="400"/);
  assert.match(svg, /a &lt; b/);
  assert.is(esc(`"x" & 'y'`), "&quot;x&quot; &amp; &#39;y&#39;");
  assert.equal([short(1500), short(2_000_000), short(0.25)], ["1.5k", "2M", "0.25"]);
  assert.equal([color(0), color(1)], ["rgb(68,1,84)", "rgb(253,231,37)"]);
});

test.run();
