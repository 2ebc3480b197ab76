/**
 * kvwarm's gate: its checks run in the design's order and the first failure names the
 * skip reason; the content probe (dataset, tokenizer, depth) runs before any capacity
 * decision; `--kvwarm on` on a dense model runs fake KV and says why; an eligible rank
 * whose peer is not becomes `peer_ineligible`.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { checkArtifact } from "../../../src/bench/artifact_check.ts";
import type { BenchCapacity, KvwarmSection } from "../../../src/bench/artifact.ts";
import type { DecodeSeeder } from "../../../src/bench/decode_seeder.ts";
import {
  KVWARM_SKIP,
  type KvwarmGateInputs,
  probeKvwarmGate,
  withGroupVerdict,
} from "../../../src/bench/kvwarm/gate.ts";
import { KvwarmSeeder } from "../../../src/bench/kvwarm/kvwarm_seeder.ts";
import { modelTokenizer } from "../../../src/bench/model_tokenizer.ts";
import { isCollectionBody, TextPoolError } from "../../../src/bench/text_pool.ts";
import {
  corpusBodies,
  kvwarmBench,
  MOE_ENGINE_INFO,
  qwen3Tokenizer,
  runKvwarmBench,
  VOCAB,
} from "./kvwarm_harness.ts";
import { CPU_ENGINE_INFO } from "../bench_harness.ts";

/** Inputs that pass every check (over `pool`), with a log of which probes ran. */
function inputs(over: Partial<KvwarmGateInputs> = {}, pool = corpusBodies()) {
  const asked: string[] = [];
  const i: KvwarmGateInputs = {
    requested: "auto",
    moe: true,
    prefixCaching: true,
    maxModelLen: 256,
    vocabSize: VOCAB,
    contentSeed: "0",
    rank: 0,
    tokenizer: () => {
      asked.push("tokenizer");
      return qwen3Tokenizer();
    },
    bodies: () => {
      asked.push("dataset");
      return pool;
    },
    ...over,
  };
  return { i, asked };
}

const DECODE = { schema_version: 1, decode: [{ batch_size: 2, total_kv_read_tokens: 40 }] };

test("every check passes: eligible, chain 0 already reaches max_model_len - 4, provenance recorded", () => {
  const { i, asked } = inputs();
  const g = probeKvwarmGate(i);
  assert.equal([g.eligible, g.skipReason, g.probeDepth], [true, null, 252]);
  assert.equal(asked, ["dataset", "tokenizer"]);
  assert.is(g.content!.tokens(0, 252).length, 252);
  const d = g.dataset!();
  const collection = corpusBodies().bodies.filter(isCollectionBody).length;
  assert.equal(
    [d.package, d.bodies, d.collection_bodies, d.collection_pool],
    ["nlp-corpus", corpusBodies().bodies.length, collection, "sha256(body)[0] even"],
  );
  assert.ok(d.bodies_used > 0 && d.tokens >= 252, "the probe tokenized real conversations");
});

test("the first failing check names the skip reason, and later probes never run", () => {
  const cases: [Partial<KvwarmGateInputs>, string, string[]][] = [
    [{ requested: "off", moe: false, prefixCaching: false }, KVWARM_SKIP.flagOff, []],
    [{ moe: false, prefixCaching: false }, KVWARM_SKIP.dense, []],
    [{ requested: "on", moe: false }, KVWARM_SKIP.dense, []],
    [{ prefixCaching: false }, KVWARM_SKIP.noPrefixCaching, []],
    [{ vocabSize: 1000 }, "tokenizer_unavailable:vocab_mismatch", ["dataset", "tokenizer"]],
  ];
  for (const [over, reason, probes] of cases) {
    const { i, asked } = inputs(over);
    const g = probeKvwarmGate(i);
    assert.equal([g.eligible, g.skipReason], [false, reason], JSON.stringify(over));
    assert.equal(asked, probes, `probes run for ${reason}`);
    assert.is(g.content, null);
  }
});

test("dataset and tokenizer failures carry the loader's reasons, dataset first", () => {
  const { i, asked } = inputs({
    bodies: () => {
      asked.push("dataset");
      throw new TextPoolError("dataset_unavailable:sha256_mismatch", "data changed");
    },
  });
  const g = probeKvwarmGate(i);
  assert.equal([g.skipReason, asked], ["dataset_unavailable:sha256_mismatch", ["dataset"]]);
  // a synthetic model without a tokenizer: the loader's own refusal
  const t = probeKvwarmGate(
    inputs({ tokenizer: () => modelTokenizer("synthetic:mixtral-8x7b") }).i,
  );
  assert.is(t.skipReason, "tokenizer_unavailable:synthetic_model");
  assert.match(t.message, /ships no tokenizer/);
});

test("content_too_shallow: a pool of a few conversations cannot reach max_model_len - 4", () => {
  const few = { bodies: corpusBodies().bodies.filter(isCollectionBody).slice(0, 6), version: "x" };
  const { i, asked } = inputs({}, few);
  const shallow = probeKvwarmGate(i);
  // the gate keeps only the collection half: all six are in it
  assert.equal([shallow.eligible, shallow.skipReason], [false, "content_too_shallow"]);
  assert.match(shallow.message, /holds all 6 conversations/);
  assert.equal(asked, ["dataset", "tokenizer"], "the depth is probed last");
  const ok = probeKvwarmGate(inputs({ maxModelLen: 24 }, few).i);
  assert.ok(ok.eligible, "20 tokens of six conversations are enough");
});

test("--kvwarm on for a dense model: the sweep runs fake KV (legacy) and says why", async () => {
  const b = kvwarmBench(DECODE, { kvwarm: "on" });
  const a = await runKvwarmBench(b, { ...CPU_ENGINE_INFO, vocab_size: VOCAB });
  assert.equal(checkArtifact(a), []);
  assert.equal(a.results.map((r) => r.kv_seed_regime), ["legacy"]);
  const k = a.kvwarm;
  assert.equal([k.enabled, k.requested, k.warm_eligible, k.skip_reason], [
    false,
    "on",
    false,
    "dense_model_content_insensitive",
  ]);
  assert.ok(
    b.logs.some((l) =>
      /^kvwarm: on, but decode points use fake KV \(regime legacy\): dense_model/.test(l)
    ),
    b.logs.join("\n"),
  );
});

test("the gate is decided before the capacity round, and a peer that is not eligible turns this rank off", async () => {
  let seen: KvwarmSection | null = null;
  const negotiate = (own: BenchCapacity, seeder: DecodeSeeder) => {
    seen = seeder.section(); // what the envelope offers the group
    (seeder as KvwarmSeeder).groupIneligible(KVWARM_SKIP.peerIneligible);
    return Promise.resolve(own);
  };
  const b = kvwarmBench(DECODE);
  const a = await b.run.run(
    { engine: b.engine, engineInfo: MOE_ENGINE_INFO, tokenizer: qwen3Tokenizer },
    { negotiate },
  );
  assert.equal([seen!.warm_eligible, seen!.skip_reason], [true, null]);
  assert.equal(checkArtifact(a), []);
  assert.equal([a.kvwarm.enabled, a.kvwarm.skip_reason], [false, "peer_ineligible"]);
  assert.equal(a.results.map((r) => r.kv_seed_regime), ["legacy"]);
  const probe = b.logs.findIndex((l) => l.startsWith("kvwarm: on ("));
  const off = b.logs.findIndex((l) => l.startsWith("kvwarm: off (peer_ineligible)"));
  const grid = b.logs.findIndex((l) => l.startsWith("grid:"));
  assert.ok(probe >= 0 && probe < off && off < grid, b.logs.join("\n"));
});

test("withGroupVerdict leaves an ineligible gate's own reason alone", () => {
  const dense = probeKvwarmGate(inputs({ moe: false }).i);
  assert.is(withGroupVerdict(dense).skipReason, KVWARM_SKIP.dense);
  const ok = probeKvwarmGate(inputs().i);
  assert.equal([withGroupVerdict(ok).eligible, withGroupVerdict(ok).skipReason], [
    false,
    "peer_ineligible",
  ]);
});

test.run();
