import { test } from "uvu";
import * as assert from "uvu/assert";
import { execFileSync, spawnSync } from "node:child_process";
import { join } from "node:path";
import process from "node:process";
import { projectRoot } from "../../src/util/project_root.ts";

// The same TypeScript runs under Node: the node-build bundle of a task runs real kernels
// on the present adapter through Node's own dawn.node loading.
test("node-build: validate runs under Node and every row passes", () => {
  const root = projectRoot();
  execFileSync(process.execPath, ["run", "-A", "scripts/node_build.ts", "--task", "validate"], {
    cwd: root,
    stdio: "pipe",
  });
  const node = spawnSync("node", [
    join(root, "dist/node/validate.mjs"),
    "--kernel",
    "rmsnorm,softmax",
    "--max-bytes",
    "5000",
  ], {
    cwd: root,
    encoding: "utf8",
  });
  assert.is(node.status, 0, node.stderr);
  assert.match(node.stdout, /(\d+) of \1 rows pass/);
  assert.match(node.stdout, /^rmsnorm .* pass/m);
});

test.run();
