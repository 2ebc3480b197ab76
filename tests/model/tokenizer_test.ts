/**
 * The runtime tokenizer (@huggingface/tokenizers, pure JS) against the reference: Hugging
 * Face's Rust implementation through the native `tokenizers` npm binding (dev-only), on
 * real text from the nlp-corpus package (~370 KB: one document plus every sentence of the
 * corpus that has non-ASCII characters: typographic punctuation, accents, Arabic, emoji).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import {
  ModelTokenizer,
  qwen3TokenizerConfigPath,
  qwen3TokenizerJsonPath,
} from "../../src/model/tokenizer.ts";

const require = createRequire(import.meta.url);

interface NativeTokenizer {
  encode(
    text: string,
    pair: null,
    options: { addSpecialTokens: boolean },
  ): Promise<{ getIds(): number[] }>;
  getVocabSize(withAddedTokens: boolean): number;
}
const native: { Tokenizer: { fromFile(path: string): NativeTokenizer } } = require("tokenizers");

function realText(): string {
  const builds = join(dirname(require.resolve("nlp-corpus")), "..", "..", "builds");
  const doc = (i: number): string[] =>
    JSON.parse(readFileSync(join(builds, `doc-${i}.json`), "utf8"));
  const nonAscii: string[] = [];
  for (let i = 0; i < 50; i++) nonAscii.push(...doc(i).filter((s) => /[^\p{ASCII}]/u.test(s)));
  return [...doc(0), ...nonAscii].join("\n");
}

const tok = ModelTokenizer.fromFile(qwen3TokenizerJsonPath(), qwen3TokenizerConfigPath());
const reference = native.Tokenizer.fromFile(qwen3TokenizerJsonPath());

test("ids equal the Rust reference tokenizer's on ~370 KB of real text", async () => {
  const text = realText();
  assert.ok(text.length > 300_000, `sample has ${text.length} characters`);
  assert.ok((text.match(/[^\p{ASCII}]/gu) ?? []).length > 4000, "sample has non-ASCII text");
  const ours = tok.encode(text);
  const theirs = (await reference.encode(text, null, { addSpecialTokens: false })).getIds();
  const first = ours.findIndex((id, i) => id !== theirs[i]);
  assert.ok(
    first === -1 && ours.length === theirs.length,
    `first difference at ${first}: ours ${ours.slice(first, first + 5)} vs ${
      theirs.slice(first, first + 5)
    } (${ours.length} vs ${theirs.length} ids)`,
  );
});

test("short strings in several scripts tokenize like the reference, one by one", async () => {
  const samples = [
    "Hello world",
    " leading space and  double  spaces\n\nnew paragraphs\t tabs",
    "Ünïcödé façade, naïve café — “quotes” … 1234567 3.14159",
    "你好，世界！今天天气很好。",
    "こんにちは世界 カタカナ",
    "Привет, мир! Ελληνικά",
    "مرحبا بالعالم",
    "emoji 🙂👍🏽 family 👨‍👩‍👧",
    'code: fn main() { println!("{}", x); } // ok',
    "<|im_start|>user\nhi<|im_end|>",
  ];
  for (const s of samples) {
    const theirs = (await reference.encode(s, null, { addSpecialTokens: false })).getIds();
    assert.equal([...tok.encode(s)], theirs, s);
  }
});

test("decode inverts encode on real text", () => {
  const text = realText().slice(0, 50_000);
  assert.is(tok.decode(tok.encode(text)), text);
});

test("vocab size counts the added tokens, and <|im_end|> is the eos id", () => {
  assert.is(tok.vocabSize, reference.getVocabSize(true));
  assert.is(tok.vocabSize, 151669);
  assert.equal(tok.eosTokenIds, [151645]);
  assert.is(tok.tokenToId("<|endoftext|>"), 151643);
  assert.is(tok.idToToken(151644), "<|im_start|>");
});

test("encode adds no special tokens", () => {
  assert.equal([...tok.encode("Hello world")], [9707, 1879]);
  assert.equal([...tok.encode("")], []);
});

test("a missing tokenizer file is named in the error", () => {
  assert.throws(
    () => ModelTokenizer.fromDir("/nonexistent/model"),
    /\/nonexistent\/model\/tokenizer.json: not found/,
  );
});

test.run();
