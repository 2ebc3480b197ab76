import { test } from "uvu";
import * as assert from "uvu/assert";

test("one plus one", () => {
  assert.is(1 + 1, 2);
});
test.run();
