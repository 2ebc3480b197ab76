import { test } from "uvu";
import * as assert from "uvu/assert";
import { sizePairs, UsageError } from "../../src/cli/args.ts";

test("sizePairs reads AxB pairs of positive integers and names a bad one", () => {
  assert.equal(sizePairs("--shapes", ["1x2048", " 64x512"], "BATCHxTOKENS"), [[1, 2048], [
    64,
    512,
  ]]);
  for (const bad of ["8by4", "0x16", "8x", "x8", "2x3x4", "-1x4"]) {
    assert.throws(
      () => sizePairs("--shapes", ["1x1", bad], "BATCHxTOKENS"),
      (e: Error) =>
        e instanceof UsageError &&
        e.message === `--shapes: '${bad}' is not BATCHxTOKENS with both at least 1`,
      bad,
    );
  }
  assert.throws(() => sizePairs("--points", [], "BATCHxCTX"), /--points: nothing given/);
});

test.run();
