/** heldCache hands out a value while someone holds it, and loads per key. */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { heldCache } from "../../src/util/held_cache.ts";

test("a held value is handed out again; another key loads its own", () => {
  let loads = 0;
  const of = heldCache((key: string) => ({ key, n: ++loads }));
  const a = of("a");
  assert.is(of("a"), a);
  assert.is(loads, 1);
  const b = of("b");
  assert.equal([b.key, loads], ["b", 2]);
  assert.is(of("a"), a, "still held");
});

test.run();
