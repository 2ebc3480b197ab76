import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runTask } from "./cli_run.ts";

test("validate: small rmsnorm cases pass, one progress line per row, a complete JSON report", () => {
  const json = join(mkdtempSync(join(tmpdir(), "webfpm-validate-")), "rows.json");
  const r = runTask("validate", ["--kernel", "rmsnorm", "--max-bytes", "3000", "--json", json]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /rows pass on/);
  const report = JSON.parse(readFileSync(json, "utf8"));
  assert.ok(report.complete);
  assert.ok(report.rows.length > 0 && report.rows.every((row: { pass: boolean }) => row.pass));
  // stderr is not a terminal here: one line per row, so a stopped run says how far it got
  const progress = r.stderr.split("\n").filter((l) => / rows, last: rmsnorm /.test(l));
  assert.is(progress.length, report.rows.length);
});

test("validate: a case with no result in time is reported as hung and the run stops", () => {
  const json = join(mkdtempSync(join(tmpdir(), "webfpm-validate-")), "rows.json");
  const r = runTask("validate", [
    "--kernel",
    "rmsnorm,softmax",
    "--case-timeout",
    "0.000001",
    "--json",
    json,
  ]);
  assert.is(r.code, 1, r.stderr);
  assert.match(r.stdout, /stopped at rmsnorm .*: it gave no result/);
  assert.match(r.stdout, /FAIL rmsnorm .*no result after/);
  const report = JSON.parse(readFileSync(json, "utf8"));
  assert.is(report.complete, false);
  assert.is(report.rows.length, 1, "the cases after the hung one are not run");
  assert.match(report.rows[0].firstBad, /^no result after/);
});

test.run();
