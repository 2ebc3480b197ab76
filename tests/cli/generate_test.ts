/**
 * Serving several prompts at once on the GPU model (lavapipe, tiny Qwen3-MoE, f32):
 * under greedy sampling every request gets exactly the tokens it gets when served alone,
 * with synchronous and with async scheduling, while its prefill is chunked into steps
 * shared with other requests' decodes and a prefix block is shared through the cache.
 * And `deno task generate` end to end: the text it prints, and an overlong prompt refused.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ensureFixture } from "../../scripts/fixtures.ts";
import type { StepObservation } from "../../src/engine/step_observation.ts";
import { GpuModel } from "../../src/model/gpu_model.ts";
import { ModelTokenizer } from "../../src/model/tokenizer.ts";
import { type ServeOptions, servePrompts } from "../../src/cli/serve_prompts.ts";
import { sharedGpu } from "../shared_gpu.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const deno = `${root}node_modules/.bin/deno`;
const dir = ensureFixture("tiny-qwen3-moe").dir;
const tokenizer = ModelTokenizer.fromDir(dir);
const TEXTS = [
  "The quick brown fox jumps over the lazy dog",
  "The quick brown fox is quick", // its first block (4 tokens) is p0's: a prefix-cache hit
  "Hello",
  "Paged attention and continuous batching, served on WebGPU through Dawn and Vulkan.",
];
const prompts = TEXTS.map((t) => tokenizer.encode(t));
const MAX_TOKENS = 5;
const GREEDY: ServeOptions = { maxTokens: MAX_TOKENS, ignoreEos: true };

let loaded: Promise<GpuModel> | undefined;
const model = () =>
  loaded ??= sharedGpu().then((gpu) =>
    GpuModel.load(gpu, dir, {
      dtype: "f32",
      blockSize: 4,
      numBlocks: 64,
      maxNumTokens: 32,
      maxNumSeqs: 8,
      maxModelLen: 64,
    })
  );

let aloneTokens: Promise<number[][]> | undefined;
/** Each prompt served by itself, one after another. */
const alone = () =>
  aloneTokens ??= (async () => {
    const out: number[][] = [];
    for (const p of prompts) {
      const r = await servePrompts(await model(), [p], GREEDY);
      out.push([...r.requests[0].outputTokenIds]);
    }
    return out;
  })();

for (const asyncScheduling of [false, true]) {
  const mode = asyncScheduling ? "async" : "sync";
  test(`${mode}: prompts served together get exactly the greedy tokens each gets alone`, async () => {
    const expected = await alone();
    assert.ok(expected.every((t) => t.length === MAX_TOKENS), "ignoreEos: maxTokens each");
    const streamed: number[][] = prompts.map(() => []);
    const steps: StepObservation[] = [];
    const r = await servePrompts(await model(), prompts, {
      ...GREEDY,
      asyncScheduling,
      // An 8-token budget chunks the longer prompts into steps shared with decodes.
      engine: { maxNumBatchedTokens: 8 },
      onToken: (i, id) => streamed[i].push(id),
      onStep: (o) => steps.push(o),
    });
    assert.equal(r.requests.map((q) => [...q.outputTokenIds]), expected);
    assert.equal(streamed, expected, "tokens stream in order as they arrive");
    assert.ok(r.requests.every((q) => q.finishReason === "length"));
    assert.is(r.requests[1].numCachedTokens, 4, "p1 reads p0's first block from the cache");
    assert.ok(
      steps.some((o) => o.numPrefillRequests > 0 && o.numDecodeRequests > 0),
      "some step mixes a prefill chunk with decodes",
    );
    assert.ok(steps.some((o) => o.numDecodeRequests >= 3), "decodes are batched");
    assert.is(r.numSteps, steps.length);
  });
}

test("a prompt not shorter than max_model_len is rejected by name before any step", async () => {
  const long = new Int32Array(64).fill(9707);
  let steps = 0;
  try {
    await servePrompts(await model(), [prompts[0], long], { ...GREEDY, onStep: () => steps++ });
    assert.unreachable("the overlong prompt was accepted");
  } catch (err) {
    assert.instance(err, Error);
    assert.match((err as Error).message, /prompt 1: the prompt has 64 tokens/);
    assert.match((err as Error).message, /max_model_len/);
  }
  assert.is(steps, 0);
});

function generateCli(...args: string[]) {
  const r = spawnSync(deno, ["run", "-A", `${root}src/cli/generate.ts`, ...args], {
    cwd: root,
    encoding: "utf8",
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test("deno task generate streams each request's text, prefixed by its index, then the whole texts and a per-request summary", async () => {
  const expected = await alone();
  const r = generateCli(
    ...["--model", dir, "--prompt", TEXTS[0], "--prompt", TEXTS[2], "--max-tokens", "3"],
    ...["--ignore-eos", "--dtype", "f32", "--max-model-len", "64", "--async"],
  );
  assert.is(r.code, 0, r.stderr);
  for (const i of [0, 1]) {
    const text = tokenizer.decode(expected[i * 2].slice(0, 3));
    assert.ok(r.stdout.includes(`\n[${i}] ${TEXTS[i * 2]}${text}\n`), `request ${i}: ${r.stdout}`);
  }
  assert.match(r.stdout, /^\[0\] /m);
  assert.match(r.stdout, /^\[1\] /m);
  assert.match(r.stdout, /^\s+0\s+9\s+0\s+3\s+length\s/m);
  assert.match(r.stdout, /^\s+1\s+1\s+0\s+3\s+length\s/m);
  assert.match(r.stdout, /6 tokens for 2 requests in \d+ steps.*async scheduling, f32/);
});

test("deno task generate refuses an overlong prompt with exit code 2, before loading the model", () => {
  const r = generateCli(
    ...["--model", dir, "--prompt", "Hi", "--prompt", TEXTS[0], "--max-tokens", "4"],
    ...["--max-model-len", "9"],
  );
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /prompt 1 has 9 tokens; max_model_len is 9/);
  assert.not.match(r.stderr, /loading/);
});

test("deno task generate without --max-tokens or --prompt is a usage error", () => {
  const r = generateCli("--model", dir, "--prompt", "Hi");
  assert.is(r.code, 2);
  assert.match(r.stderr, /--max-tokens is required/);
  const s = generateCli("--model", dir, "--max-tokens", "2");
  assert.is(s.code, 2);
  assert.match(s.stderr, /--prompt is required/);
});

test.after(async () => {
  if (loaded) (await loaded).destroy();
});

test.run();
