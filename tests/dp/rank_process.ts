/**
 * One rank in its own process, for tests/dp/rank_processes_test.ts.
 *
 * Usage: `deno run -A tests/dp/rank_process.ts <sweep|barriers> --dp-rank R --dp-size N
 * --dp-master HOST:PORT [--timeout-ms MS]`. Prints one JSON event per line on stdout
 * (`open`, `log`, `step`, `done`, `error`); exits 0 when done, 3 after a DpError.
 */
import process from "node:process";
import { DpError } from "../../src/dp/dp_error.ts";
import { resolveRank } from "../../src/dp/rank_identity.ts";
import { RankSynchronizer } from "../../src/dp/rank_synchronizer.ts";
import { runSweep } from "./rank_sweep.ts";

const [scenario, ...args] = process.argv.slice(2);
const timeoutAt = args.indexOf("--timeout-ms");
const timeoutMs = timeoutAt >= 0 ? Number(args[timeoutAt + 1]) : 10_000;
const say = (event: Record<string, unknown>) => console.log(JSON.stringify(event));

let sync: RankSynchronizer | null = null;
try {
  sync = await RankSynchronizer.open(resolveRank({ argv: args, env: process.env }), {
    timeoutMs,
    connectTimeoutMs: 60_000,
    log: (line) => say({ event: "log", line }),
  });
  say({ event: "open", rank: sync.rank });
  if (scenario === "sweep") {
    say({ event: "done", summary: await runSweep(sync) });
  } else if (scenario === "barriers") {
    for (let step = 0;; step++) {
      await sync.barrier(step);
      if (step % 10 === 0) say({ event: "step", step });
    }
  } else {
    throw new Error(`unknown scenario '${scenario}'`);
  }
} catch (err) {
  sync?.close();
  if (!(err instanceof DpError)) throw err;
  say({ event: "error", code: err.code, message: err.message, ranks: err.ranks });
  process.exit(3);
}
