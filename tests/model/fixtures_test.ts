import { test } from "uvu";
import * as assert from "uvu/assert";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureFixture, fixtureRecipes } from "../../scripts/fixtures.ts";
import { Checkpoint } from "../../src/model/checkpoint.ts";
import { loadModelConfig } from "../../src/model/config.ts";
import { ModelTokenizer } from "../../src/model/tokenizer.ts";

test("each recipe's fixture has its config, dtype, layout and the real tokenizer", () => {
  const expected: Record<string, { dtype: string; files: string[]; arch: string; tied: boolean }> =
    {
      "tiny-qwen3-moe": {
        dtype: "BF16",
        files: ["model.safetensors"],
        arch: "Qwen3MoeForCausalLM",
        tied: false,
      },
      "tiny-mixtral": {
        dtype: "F16",
        files: ["model.safetensors"],
        arch: "MixtralForCausalLM",
        tied: true,
      },
      "tiny-qwen3": {
        dtype: "F32",
        files: [
          "model-00001-of-00002.safetensors",
          "model-00002-of-00002.safetensors",
          "model.safetensors.index.json",
        ],
        arch: "Qwen3ForCausalLM",
        tied: true,
      },
    };
  assert.equal(Object.keys(fixtureRecipes()).sort(), Object.keys(expected).sort());
  for (const [name, want] of Object.entries(expected)) {
    const { dir } = ensureFixture(name);
    const config = loadModelConfig(dir);
    assert.is(config.architecture, want.arch, name);
    assert.is(config.tieWordEmbeddings, want.tied, name);
    const files = readdirSync(dir).filter((f) => f.startsWith("model")).sort();
    assert.equal(files, want.files, name);
    const ckpt = Checkpoint.open(dir);
    assert.ok(
      ckpt.names().every((n) => ckpt.info(n).dtype === want.dtype),
      `${name}: all ${want.dtype}`,
    );
    ckpt.close();
    const tok = ModelTokenizer.fromDir(dir);
    assert.is(config.vocabSize, tok.vocabSize, `${name}: vocab fits the tokenizer`);
    assert.ok(existsSync(join(dir, "generation_config.json")));
  }
  const moe = loadModelConfig(ensureFixture("tiny-qwen3-moe").dir);
  assert.equal(moe.layerKinds, ["moe", "dense", "moe"]);
  assert.equal(loadModelConfig(ensureFixture("tiny-mixtral").dir).eosTokenIds, [151643, 151645]);
});

test("generation is deterministic and skipped when the recipe hash matches", () => {
  const out = mkdtempSync(join(tmpdir(), "webfpm-fixtures-"));
  const first = ensureFixture("tiny-qwen3", out);
  assert.ok(first.generated);
  assert.not.ok(ensureFixture("tiny-qwen3", out).generated, "second run is a no-op");
  const main = ensureFixture("tiny-qwen3").dir;
  for (const f of readdirSync(main)) {
    assert.ok(
      readFileSync(join(main, f)).equals(readFileSync(join(first.dir, f))),
      `${f} identical`,
    );
  }
  writeFileSync(join(first.dir, "recipe.sha256"), "stale\n");
  assert.ok(ensureFixture("tiny-qwen3", out).generated, "a stale stamp regenerates");
});

test("an unknown fixture name is refused", () => {
  assert.throws(() => ensureFixture("tiny-gpt"), /no fixture recipe "tiny-gpt"/);
});

test.run();
