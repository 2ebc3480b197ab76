/**
 * `predict` and `fidelity` as a user runs them, on a synthetic library and step log:
 * the numbers they print, the refusal outside the domain (exit 2), bad input named.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { formatStepLine, type ServedStep } from "../../src/report/served_steps.ts";
import { decodePoint, prefillPoint, syntheticArtifact } from "../report/synthetic_artifact.ts";
import { runTask } from "./cli_run.ts";

const dir = mkdtempSync(join(tmpdir(), "webfpm-predict-"));
const library = join(dir, "lib.json");
// decode: 2 ms + 0.001 ms per KV token at batches 1 and 4; prefill: 1 ms + 0.01 ms/token
writeFileSync(
  library,
  JSON.stringify(syntheticArtifact([
    ...[1, 4].flatMap((b) =>
      [b, 100 * b].map((k) => ({
        point: decodePoint(b, k),
        regime: "real_kv" as const,
        walls: [(2 + 0.001 * k) / 1000],
      }))
    ),
    ...[100, 1000].map((t) => ({
      point: prefillPoint(1, t),
      regime: "not_applicable" as const,
      walls: [(1 + 0.01 * t) / 1000],
    })),
  ])),
);

/** A step log's header for a trace of `requests` requests. */
function replayHeader(requests: number) {
  return {
    kind: "replay_header" as const,
    schema_version: 1 as const,
    model: "m",
    trace: { path: "t", sha256: "x", requests },
    engine: {},
    gpu: "g",
    started_at: "now",
  };
}

test("predict prints grid and fit predictions for a decode and a prefill step", () => {
  const d = runTask("predict", ["--library", library, "--batch", "4", "--kv", "200"]);
  assert.is(d.code, 0, d.stderr);
  assert.match(d.stdout, /grid 2\.200 ms/);
  assert.match(d.stdout, /fit\s+2\.200 ms/);
  const p = runTask("predict", ["--library", library, "--batch", "1", "--prefill-tokens", "550"]);
  assert.is(p.code, 0, p.stderr);
  assert.match(p.stdout, /grid 6\.500 ms/);
});

test("predict refuses outside the collected domain with exit code 2 and says why", () => {
  const r = runTask("predict", ["--library", library, "--batch", "8", "--kv", "800"]);
  assert.is(r.code, 2);
  assert.match(
    r.stderr,
    /grid refused: outside the collected domain: .*batch 8 is outside the collected batch range \[1, 4\]/,
  );
  const missing = runTask("predict", ["--library", join(dir, "nope.json"), "--batch", "1"]);
  assert.is(missing.code, 2);
  assert.match(missing.stderr, /nope\.json: cannot read the artifact/);
});

test("fidelity prints MAPE, p50 and p90 per regime and step kind, and writes JSON", () => {
  const header = replayHeader(2);
  const step = (id: number, b: number, k: number, ms: number): ServedStep => ({
    kind: "step",
    step_id: id,
    num_requests: b,
    num_scheduled_tokens: b,
    num_prefill_requests: 0,
    sum_prefill_tokens: 0,
    sum_prefill_kv_tokens: 0,
    num_decode_requests: b,
    sum_decode_kv_tokens: k,
    num_preempted: 0,
    num_block_copies: 0,
    t_ms: id,
    wall_ms: ms,
    interval_ms: ms,
    gpu_ms: null,
  });
  const served = join(dir, "steps.jsonl");
  // predictions 2.1 and 2.2 ms: errors 5% and 10%
  writeFileSync(
    served,
    formatStepLine(header) + formatStepLine(step(1, 1, 100, 2.0)) +
      formatStepLine(step(2, 4, 200, 2.0)),
  );
  const out = join(dir, "fid.json");
  const r = runTask("fidelity", [
    "--library",
    library,
    "--served",
    served,
    "--method",
    "grid",
    "--json",
    out,
  ]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /all\s+grid\s+decode\s+2\s+2\s+0\s+7\.50\s+7\.50\s+9\.50/);
  const json = JSON.parse(readFileSync(out, "utf8"));
  assert.equal(json.metric, "interval");
  const bad = runTask("fidelity", ["--library", library, "--served", library]);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, /must be the replay_header|not JSON/);
});

test("fidelity refuses a served step no engine writes (fewer KV tokens than requests) with exit code 2", () => {
  const library = join(dir, "lib-kv.json");
  writeFileSync(
    library,
    JSON.stringify(syntheticArtifact([
      { point: decodePoint(1, 1), regime: "real_kv", walls: [0.002] },
      { point: decodePoint(4, 400), regime: "real_kv", walls: [0.003] },
    ])),
  );
  const served = join(dir, "steps-kv.jsonl");
  const header = replayHeader(1);
  // four decode requests reading two KV tokens
  const step: ServedStep = {
    kind: "step",
    step_id: 1,
    num_requests: 4,
    num_scheduled_tokens: 4,
    num_prefill_requests: 0,
    sum_prefill_tokens: 0,
    sum_prefill_kv_tokens: 0,
    num_decode_requests: 4,
    sum_decode_kv_tokens: 2,
    num_preempted: 0,
    num_block_copies: 0,
    t_ms: 1,
    wall_ms: 3,
    interval_ms: 3,
    gpu_ms: null,
  };
  writeFileSync(served, formatStepLine(header) + formatStepLine(step));
  const r = runTask("fidelity", ["--library", library, "--served", served]);
  assert.is(r.code, 2, r.stderr);
  assert.not.match(r.stderr, /\n\s+at /, "no stack trace");
  assert.match(r.stderr, /steps-kv\.jsonl:2: sum_decode_kv_tokens < num_decode_requests/);
});

test("predict refuses a library decode row without requests with exit code 2", () => {
  const a = syntheticArtifact([
    { point: decodePoint(1, 16), regime: "real_kv", walls: [0.002] },
    { point: decodePoint(4, 64), regime: "real_kv", walls: [0.003] },
  ]);
  // A decode fpm with num_decode_requests 0 (checkArtifact accepts any integer >= 0).
  const bad = {
    ...a,
    results: a.results.map((r, i) =>
      i === 0
        ? { ...r, fpms: r.fpms.map((f) => ({ ...f, num_decode_requests: 0, num_requests: 0 })) }
        : r
    ),
  };
  const library = join(dir, "bad.json");
  writeFileSync(library, JSON.stringify(bad));
  const r = runTask("predict", ["--library", library, "--batch", "4", "--kv", "64"]);
  assert.is(r.code, 2, r.stderr);
  assert.not.match(r.stderr, /\n\s+at /, "no stack trace");
  assert.match(r.stderr, /results\[0\]: a decode fpm needs num_decode_requests >= 1/);
});

test.run();
