/**
 * The thread's CPU from /proc: the `processor` field found past a command name with spaces
 * and parens, and a real reading on Linux that names one of the machine's CPUs.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { cpus } from "node:os";
import process from "node:process";
import { processorField, threadCpu } from "../../src/util/thread_cpu.ts";

test("the 39th field, past a command name holding spaces and a paren", () => {
  const tail = Array.from({ length: 50 }, (_, i) => String(i + 3));
  tail[36] = "7"; // field 39
  assert.is(processorField(`1234 (deno (main) x) ${tail.join(" ")}\n`), 7);
  assert.is(processorField("1234 (short) S 1 2"), null);
});

test("on Linux the reading is one of this machine's CPUs", () => {
  const cpu = threadCpu();
  if (process.platform !== "linux") {
    assert.is(cpu, null);
    return;
  }
  assert.ok(cpu !== null && cpu >= 0, `cpu ${cpu}`);
  assert.ok(cpu! < Math.max(cpus().length, 1024), `cpu ${cpu} of ${cpus().length}`);
});

test.run();
