/**
 * `deno task logits` as a user runs it (a subprocess on lavapipe): the file it writes
 * holds every prompt position's logits, equal to the CPU reference, and the prompt's ids;
 * bad input exits with code 2 and a message naming the problem, leaving no file.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureFixture } from "../../scripts/fixtures.ts";
import { referenceLogits, ReferenceModel } from "../../src/model/reference_model.ts";
import { SafetensorsFile } from "../../src/model/safetensors_file.ts";
import { ModelTokenizer } from "../../src/model/tokenizer.ts";
import { maxAbsDiff } from "../model/gpu_model_step.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const deno = `${root}node_modules/.bin/deno`;
const out = mkdtempSync(join(tmpdir(), "webfpm-logits-"));
const moe = ensureFixture("tiny-qwen3-moe").dir;
const mixtral = ensureFixture("tiny-mixtral").dir;

function logitsCli(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(deno, ["run", "-A", `${root}src/cli/logits.ts`, ...args], {
    cwd: root,
    encoding: "utf8",
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function readOutput(path: string) {
  const file = SafetensorsFile.open(path);
  try {
    const ids = file.read("token_ids");
    const logits = file.read("logits");
    return {
      names: file.names(),
      logitsInfo: file.info("logits"),
      idsInfo: file.info("token_ids"),
      metadata: file.header.metadata,
      ids: Array.from(new Int32Array(ids.buffer, ids.byteOffset, ids.byteLength / 4)),
      logits: new Float32Array(logits.buffer, logits.byteOffset, logits.byteLength / 4),
    };
  } finally {
    file.close();
  }
}

test("a prompt longer than one step runs as chunked prefill and writes every position's logits, equal to the CPU reference (f32, 1e-4)", () => {
  const text = "The quick brown fox jumps over the lazy dog";
  const path = join(out, "moe.safetensors");
  const r = logitsCli("--model", moe, "--prompt", text, "--out", path, "--max-step-tokens", "4");
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /9 tokens in 3 prefill steps of at most 4/);
  assert.not.ok(existsSync(path + ".partial"), "no partial file is left behind");
  const f = readOutput(path);
  const ids = Array.from(ModelTokenizer.fromDir(moe).encode(text));
  assert.equal(f.names, ["logits", "token_ids"]);
  assert.equal(f.ids, ids);
  assert.equal(f.idsInfo.dtype, "I32");
  assert.equal(f.logitsInfo.dtype, "F32");
  assert.equal(f.logitsInfo.shape, [ids.length, 151669]);
  assert.is(f.metadata.dtype, "f32");
  const err = maxAbsDiff(f.logits, referenceLogits(ReferenceModel.load(moe), ids));
  assert.ok(err <= 1e-4, `max abs error ${err}`);
});

test("--token-ids and --dtype f16: one prefill step, logits within 2e-2 of the f16-rounded CPU reference", () => {
  const ids = [9707, 1879, 11, 358, 1079];
  const path = join(out, "mixtral.safetensors");
  const r = logitsCli(
    "--model",
    mixtral,
    "--token-ids",
    ids.join(","),
    "--out",
    path,
    "--dtype",
    "f16",
  );
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /5 tokens in 1 prefill step /);
  const f = readOutput(path);
  assert.equal(f.ids, ids);
  assert.is(f.metadata.dtype, "f16");
  const ref = referenceLogits(ReferenceModel.load(mixtral, { roundWeightsToF16: true }), ids);
  const err = maxAbsDiff(f.logits, ref);
  assert.ok(err <= 2e-2, `max abs error ${err}`);
});

test("bad input exits with code 2, names the problem and writes nothing", () => {
  const unsupported = mkdtempSync(join(tmpdir(), "webfpm-llama-"));
  cpSync(moe, unsupported, { recursive: true });
  const config = JSON.parse(readFileSync(join(moe, "config.json"), "utf8"));
  writeFileSync(
    join(unsupported, "config.json"),
    JSON.stringify({ ...config, architectures: ["LlamaForCausalLM"] }),
  );
  const path = join(out, "bad.safetensors");
  const cases: [string[], RegExp][] = [
    [["--model", join(out, "nowhere"), "--prompt", "hi"], /model folder .*nowhere does not exist/],
    [["--model", unsupported, "--prompt", "hi"], /unsupported architecture "LlamaForCausalLM"/],
    [
      ["--model", moe, "--token-ids", "1,151669"],
      /token id 151669 at index 1 is outside the vocabulary \[0, 151669\)/,
    ],
    [["--model", moe, "--prompt", ""], /the prompt is empty/],
    [["--model", moe, "--token-ids", "1,x"], /'x' is not an integer token id/],
    [["--model", moe], /exactly one of --prompt TEXT and --token-ids/],
  ];
  try {
    for (const [args, message] of cases) {
      const r = logitsCli(...args, "--out", path);
      assert.is(r.code, 2, `${args.join(" ")}: exit code (stderr: ${r.stderr})`);
      assert.match(r.stderr, message);
      assert.not.ok(existsSync(path) || existsSync(path + ".partial"), `${args}: no file`);
    }
  } finally {
    rmSync(unsupported, { recursive: true, force: true });
  }
});

test.after(() => rmSync(out, { recursive: true, force: true }));

test.run();
