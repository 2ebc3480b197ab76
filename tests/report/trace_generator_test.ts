import { test } from "uvu";
import * as assert from "uvu/assert";
import { formatRequestTrace, parseRequestTrace } from "../../src/report/request_trace.ts";
import {
  gammaSample,
  generateTrace,
  type HeldOutPool,
  TRACE_DEFAULTS,
} from "../../src/report/trace_generator.ts";
import { Rng } from "../../src/util/rng.ts";

/** A pool of ids 0..N-1 whose "text" spells the ids, so windows can be checked. */
function pool(n = 50_000): HeldOutPool {
  return {
    tokens: Int32Array.from({ length: n }, (_, i) => i),
    decode: (ids) => Array.from(ids).join(" "),
    corpus: { name: "test", sha256: "00", documents: 1, tokenizer: "ids" },
  };
}

const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;

test("gamma gaps have mean shape and variance shape (so rate and burstiness come out as asked)", () => {
  for (const shape of [0.5, 0.84, 1, 4]) {
    const rng = Rng.fromSeed(`gamma-${shape}`);
    const xs = Array.from({ length: 40_000 }, () => gammaSample(rng, shape));
    const m = mean(xs);
    const v = mean(xs.map((x) => (x - m) ** 2));
    assert.ok(Math.abs(m / shape - 1) < 0.03, `shape ${shape}: mean ${m}`);
    assert.ok(Math.abs(v / shape - 1) < 0.08, `shape ${shape}: variance ${v}`);
  }
});

test("default traces follow the Azure conversation trace: medians, p90s, rate and gap CV", () => {
  const t = generateTrace(pool(), { requests: 4000, seed: "azure" });
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  const p = (xs: number[], q: number) => sorted(xs)[Math.floor(q * (xs.length - 1))];
  const prompts = t.requests.map((r) => r.prompt_tokens);
  const outputs = t.requests.map((r) => r.max_tokens);
  assert.ok(Math.abs(p(prompts, 0.5) / 1020 - 1) < 0.06, `prompt p50 ${p(prompts, 0.5)}`);
  assert.ok(Math.abs(p(prompts, 0.9) / 2735 - 1) < 0.08, `prompt p90 ${p(prompts, 0.9)}`);
  assert.ok(Math.abs(p(outputs, 0.5) / 129 - 1) < 0.06, `output p50 ${p(outputs, 0.5)}`);
  assert.ok(Math.abs(p(outputs, 0.9) / 424 - 1) < 0.08, `output p90 ${p(outputs, 0.9)}`);
  assert.ok(Math.max(...prompts) <= TRACE_DEFAULTS.promptMax && Math.max(...outputs) <= 1000);
  const gaps = t.requests.slice(1).map((r, i) => r.arrival_ms - t.requests[i].arrival_ms);
  const g = mean(gaps);
  const cv = Math.sqrt(mean(gaps.map((x) => (x - g) ** 2))) / g;
  assert.ok(Math.abs(1000 / g / 5.53 - 1) < 0.06, `rate ${1000 / g}`);
  assert.ok(Math.abs(cv - 1.094) < 0.08, `gap cv ${cv}`);
  assert.equal(t.header.arrival, { process: "gamma", rate_rps: 5.53, shape: 0.84 });
  assert.equal(t.header.corpus.half, "held_out");
});

test("prompts are windows of the held-out pool of exactly prompt_tokens tokens, wrapping at its end", () => {
  const t = generateTrace(pool(3000), {
    requests: 200,
    seed: "w",
    promptMedian: 500,
    promptMax: 2000,
  });
  for (const r of t.requests) {
    const ids = r.prompt.split(" ").map(Number);
    assert.equal(ids.length, r.prompt_tokens);
    ids.forEach((id, j) => j > 0 && assert.equal(id, (ids[j - 1] + 1) % 3000));
  }
});

test("the same seed gives the same trace; a shape of 1 is Poisson; the trace round-trips through JSONL", () => {
  const a = generateTrace(pool(), { requests: 20, seed: "s", shape: 1, rateRps: 2 });
  const b = generateTrace(pool(), { requests: 20, seed: "s", shape: 1, rateRps: 2 });
  assert.equal(a, b);
  assert.equal(a.header.arrival.process, "poisson");
  assert.equal(parseRequestTrace(formatRequestTrace(a), "t"), a);
  assert.not.equal(generateTrace(pool(), { requests: 20, seed: "t" }).requests, a.requests);
});

test("bad knobs and malformed traces are named", () => {
  assert.throws(() => generateTrace(pool(), { rateRps: 0 }), /rate must be > 0/);
  assert.throws(
    () => generateTrace(pool(), { promptMin: 10, promptMax: 5 }),
    /prompt lengths need/,
  );
  assert.throws(
    () => generateTrace(pool(100), { promptMax: 500 }),
    /fewer than the longest prompt/,
  );
  const good = formatRequestTrace(generateTrace(pool(), { requests: 2 })).split("\n");
  const swapped = [good[0], good[2], good[1]].join("\n");
  assert.throws(() => parseRequestTrace(swapped, "t.jsonl"), /t\.jsonl:3: arrival_ms .* before/);
  const extra = [good[0], good[1].replace('"kind"', '"color":1,"kind"'), good[2]].join("\n");
  assert.throws(() => parseRequestTrace(extra, "t.jsonl"), /t\.jsonl:2: unknown field "color"/);
  assert.throws(
    () => parseRequestTrace([good[0], good[1]].join("\n"), "t"),
    /header says 2 requests, the file has 1/,
  );
});

test.run();
