import { test } from "uvu";
import * as assert from "uvu/assert";
import { WARMUP, warmUp, warmupShape } from "../../src/bench/warmup.ts";
import { StepDriver } from "../../src/bench/step_driver.ts";
import { randomContent } from "../../src/bench/prompt_content.ts";
import { SaltScheme } from "../../src/bench/salts.ts";
import { cpuBench } from "./bench_harness.ts";
import { ManifestError } from "../../src/bench/manifest.ts";
import type { BenchCapacity } from "../../src/bench/artifact.ts";

const roomy: BenchCapacity = {
  block_size: 16,
  blocks_total: 1000,
  watermark_blocks: 10,
  usable_blocks: 990,
  max_model_len: 4096,
  max_num_seqs: 8,
  max_batched_tokens: 2048,
  prefix_caching: true,
};

test("the warm-up keeps the design's 256 tokens x 5 steps where the envelope holds them", () => {
  assert.equal(warmupShape(roomy), { promptTokens: WARMUP.promptTokens, steps: WARMUP.steps });
});

test("the warm-up prompt shrinks to the step budget, the model length and the KV pool", () => {
  assert.is(warmupShape({ ...roomy, max_batched_tokens: 64 }).promptTokens, 64);
  // 100 - 5 steps - 1
  assert.is(warmupShape({ ...roomy, max_model_len: 100 }).promptTokens, 94);
  // one usable block of 16: 16 tokens less the 5 steps' tokens
  assert.is(warmupShape({ ...roomy, usable_blocks: 1 }).promptTokens, 11);
});

test("the clock warm-up's requests take up to 2048 prompt tokens, fitted to the envelope", () => {
  const shape = warmupShape(roomy, WARMUP, 2);
  assert.equal(shape, { ...WARMUP, clockSeconds: 2, clockPromptTokens: 2048 });
  assert.is(warmupShape({ ...roomy, max_batched_tokens: 512 }, WARMUP, 2).clockPromptTokens, 512);
  assert.is(warmupShape({ ...roomy, max_model_len: 300 }, WARMUP, 2).clockPromptTokens, 298);
  assert.is(warmupShape({ ...roomy, usable_blocks: 10 }, WARMUP, 2).clockPromptTokens, 158);
  assert.throws(() => warmupShape(roomy, WARMUP, -1), /clockSeconds -1 must be >= 0/);
});

test("the clock warm-up ends when the group says so, whatever this rank's clock", async () => {
  const b = cpuBench(null);
  const votes: boolean[] = [];
  const record = await warmUp(
    new StepDriver(b.engine),
    randomContent(b.engine.model.vocabSize, "0", 0),
    new SaltScheme("run", 0),
    { promptTokens: 8, steps: 3, clockSeconds: 3600, clockPromptTokens: 32 },
    (timeUp) => {
      votes.push(timeUp);
      return Promise.resolve(votes.length === 3); // another rank's time was up
    },
  );
  assert.equal(votes, [false, false, false], "asked before the first request and after each");
  assert.equal([record.clock!.requests, record.clock!.steps], [2, 4]);
  assert.is(record.clock!.ended, "stop", "ended by the vote, not by this rank's own clock");
});

test("work run before the clock part counts toward it, and is left out of the warm-up's seconds", async () => {
  const b = cpuBench(null);
  const driver = new StepDriver(b.engine);
  const content = randomContent(b.engine.model.vocabSize, "0", 0);
  const salts = new SaltScheme("run", 0);
  const votes: boolean[] = [];
  let ran = 0;
  const record = await warmUp(
    driver,
    content,
    salts,
    { promptTokens: 8, steps: 3, clockSeconds: 0.2, clockPromptTokens: 32 },
    (timeUp) => {
      votes.push(timeUp);
      return Promise.resolve(timeUp);
    },
    async () => {
      ran++;
      await new Promise((r) => setTimeout(r, 300)); // longer than the clock warm-up
    },
  );
  assert.is(ran, 1);
  assert.equal(votes, [true], "time is up once the work is done: no request runs");
  const clock = record.clock!;
  assert.equal([clock.requests, clock.steps, clock.ended], [0, 0, "time"]);
  assert.ok(clock.counted_seconds! >= 0.29, `counted ${clock.counted_seconds} s`);
  assert.ok(record.seconds < 0.2, `the warm-up's own ${record.seconds} s leave the work out`);
  // without a clock warm-up the work is not run there (the sweep's loop runs it)
  const none = await warmUp(
    driver,
    content,
    salts,
    { promptTokens: 8, steps: 3 },
    undefined,
    () => {
      ran++;
      return Promise.resolve();
    },
  );
  assert.is(ran, 1);
  assert.is(none.clock, null);
});

/** A CPU bench of `numBlocks` blocks of 4 tokens (no watermark), its driver and content. */
function poolBench(numBlocks: number) {
  const b = cpuBench(null, {}, { numBlocks });
  const driver = new StepDriver(b.engine);
  const content = randomContent(b.engine.model.vocabSize, "0", 0);
  /** Parks requests of these prompt lengths (ids r0, r1, ...), as kvwarm parks its chains. */
  const park = (...lengths: number[]) => async () => {
    for (const [i, tokens] of lengths.entries()) {
      const id = `r${i}`;
      b.engine.addRequest(content.tokens(id, tokens), {
        maxTokens: 1,
        ignoreEos: true,
        cacheSalt: id,
      }, { requestId: id, parkOnFinish: true });
      while (b.engine.getRequest(id)?.status !== "parked") await driver.step();
    }
  };
  const warm = (
    clockSeconds: number,
    beforeClock: () => Promise<void>,
    stop = (timeUp: boolean) => Promise.resolve(timeUp),
  ) =>
    warmUp(
      driver,
      content,
      new SaltScheme("run", 0),
      { promptTokens: 8, steps: 3, clockSeconds, clockPromptTokens: 60 },
      stop,
      beforeClock,
    );
  return { engine: b.engine, park, warm };
}

test("the clock requests fit the pool beside parked requests, and a pool without room ends them", async () => {
  // 64 usable blocks; parked requests of 120 and 96 tokens hold 30 and 24 blocks: 10 are left,
  // room for a 39-token prompt and its decode
  const roomy = poolBench(65);
  const prefills: number[] = [];
  const off = roomy.engine.onStep((o) => {
    if (o.sumPrefillTokens > 0) prefills.push(o.sumPrefillTokens);
  });
  // (the parking's seconds count toward the 0.05 s: on a loaded machine they may take all of
  // them, so the vote holds the warm-up open for a clock request of the expected size, a few
  // rounds at most)
  let late = 0;
  const record = await roomy.warm(
    0.05,
    roomy.park(120, 96),
    (timeUp) => Promise.resolve(timeUp && (prefills.includes(39) || ++late > 3)),
  );
  off();
  assert.equal(roomy.engine.kvUsage().free, 10, "the parked requests' blocks stay held");
  assert.ok(record.clock!.requests >= 1);
  assert.ok(
    prefills.slice(-record.clock!.requests).every((t) => t === 39),
    `clock prefills ${prefills.slice(-record.clock!.requests)}`,
  );
  // a pool with no room: the clock warm-up ends before any request
  const full = poolBench(32);
  const rec = await full.warm(3600, full.park(124));
  assert.equal(full.engine.kvUsage().free, 0);
  assert.equal([rec.clock!.requests, rec.clock!.steps, rec.clock!.ended], [0, 0, "pool"]);
});

test("an envelope that cannot hold a one-token warm-up is refused as input, naming the fix", () => {
  const err = (c: BenchCapacity) => {
    try {
      warmupShape(c);
    } catch (e) {
      return e as ManifestError;
    }
    throw new Error("not refused");
  };
  const len = err({ ...roomy, max_model_len: 6 });
  assert.instance(len, ManifestError);
  assert.match(len.message, /raise --max-model-len$/);
  const pool = err({ ...roomy, block_size: 4, usable_blocks: 1 });
  assert.match(pool.message, /the KV pool holds 4 tokens .* raise --kv-cache-gb$/);
});

test.run();
