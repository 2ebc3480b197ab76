/**
 * The explicit manifest is strict: every problem names its point and field, all of them
 * are reported at once, and nothing but schema_version 1 with prefill / decode lists of
 * exact points is accepted.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { checkManifest, ManifestError, parseManifest } from "../../src/bench/manifest.ts";

function problems(raw: unknown): readonly string[] {
  try {
    checkManifest(raw, "m.json");
  } catch (err) {
    assert.instance(err, ManifestError);
    return (err as ManifestError).problems;
  }
  assert.unreachable("the manifest was accepted");
  return [];
}

test("a valid manifest gives its points in file order, kinds attached", () => {
  const m = parseManifest(JSON.stringify({
    schema_version: 1,
    prefill: [{ batch_size: 4, total_prefill_tokens: 4096, total_kv_read_tokens: 0 }],
    decode: [
      { batch_size: 8, total_kv_read_tokens: 65536 },
      { batch_size: 1, total_kv_read_tokens: 1 },
    ],
  }));
  assert.equal(m.prefill, [{
    kind: "prefill",
    batch_size: 4,
    total_prefill_tokens: 4096,
    total_kv_read_tokens: 0,
  }]);
  assert.equal(m.decode.map((p) => [p.kind, p.batch_size, p.total_kv_read_tokens]), [
    ["decode", 8, 65536],
    ["decode", 1, 1],
  ]);
});

test("unknown fields are errors, at the top and in a point", () => {
  const p = problems({
    schema_version: 1,
    extra: true,
    decode: [{ batch_size: 2, total_kv_read_tokens: 8, ctx: 4 }],
  });
  assert.ok(p.some((x) => /unknown field "extra"/.test(x)), p.join("\n"));
  assert.ok(p.some((x) => /^decode\[0\]: unknown field "ctx"/.test(x)), p.join("\n"));
});

test("wrong types name the point and field", () => {
  const p = problems({
    schema_version: 1,
    prefill: [{ batch_size: "4", total_prefill_tokens: 1.5, total_kv_read_tokens: null }],
    decode: "all of them",
  });
  assert.ok(
    p.includes('prefill[0].batch_size: must be an integer, got the string "4"'),
    p.join("\n"),
  );
  assert.ok(
    p.includes("prefill[0].total_prefill_tokens: must be an integer, got the fraction 1.5"),
  );
  assert.ok(p.includes("prefill[0].total_kv_read_tokens: must be an integer, got null"));
  assert.ok(p.some((x) => /^decode must be an array/.test(x)));
});

test("zero and negative sizes are errors; a missing field too", () => {
  const p = problems({
    schema_version: 1,
    prefill: [{ batch_size: 0, total_prefill_tokens: -3, total_kv_read_tokens: -1 }],
    decode: [{ batch_size: -2 }],
  });
  assert.ok(p.includes("prefill[0].batch_size: must be > 0, got 0"), p.join("\n"));
  assert.ok(p.includes("prefill[0].total_prefill_tokens: must be > 0, got -3"));
  assert.ok(p.includes("prefill[0].total_kv_read_tokens: must be >= 0, got -1"));
  assert.ok(p.includes("decode[0].batch_size: must be > 0, got -2"));
  assert.ok(p.includes("decode[0].total_kv_read_tokens: missing"));
});

test("T < B, 0 < K < B and decode K < B are errors naming the field", () => {
  const p = problems({
    schema_version: 1,
    prefill: [
      { batch_size: 8, total_prefill_tokens: 4, total_kv_read_tokens: 0 },
      { batch_size: 8, total_prefill_tokens: 64, total_kv_read_tokens: 3 },
      { batch_size: 8, total_prefill_tokens: 64, total_kv_read_tokens: 8 },
    ],
    decode: [{ batch_size: 4, total_kv_read_tokens: 3 }, {
      batch_size: 4,
      total_kv_read_tokens: 4,
    }],
  });
  assert.is(p.length, 3, p.join("\n"));
  assert.match(p[0], /^prefill\[0\]\.total_prefill_tokens: 4 < batch_size 8/);
  assert.match(p[1], /^prefill\[1\]\.total_kv_read_tokens: 3 is between 0 and batch_size 8/);
  assert.match(p[2], /^decode\[0\]\.total_kv_read_tokens: 3 < batch_size 4/);
});

test("schema_version must be 1; duplicates and an empty manifest are errors", () => {
  assert.ok(problems({ decode: [] }).some((x) => /schema_version is missing/.test(x)));
  assert.ok(
    problems({ schema_version: 2, decode: [] }).some((x) => /must be 1, got number 2/.test(x)),
  );
  assert.equal(problems({ schema_version: 1, decode: [] }), [
    "the manifest has no points (give a non-empty prefill or decode list)",
  ]);
  const dup = problems({
    schema_version: 1,
    decode: [{ batch_size: 2, total_kv_read_tokens: 8 }, {
      batch_size: 2,
      total_kv_read_tokens: 8,
    }],
  });
  assert.equal(dup, ["decode[1]: duplicate of decode[0] (decode:B2:K8)"]);
});

test("text that is not JSON, or not an object, is one clear problem", () => {
  assert.throws(() => parseManifest("{", "m.json"), /m\.json: 1 problem\(s\):\n {2}not valid JSON/);
  assert.throws(() => parseManifest("[]", "m.json"), /must be a JSON object, got an array/);
});

test.run();
