/**
 * `deno task predict --library ARTIFACT[,ARTIFACT...] --batch B --kv K [--prefill-tokens T]
 * [--regime R[,R...]] [--method grid|fit|both]`: the predicted wall time of a decode step
 * (B requests reading K KV tokens) or, with `--prefill-tokens`, of a prefill step (T new
 * tokens over B requests reading K cached tokens). Outside the collected domain it
 * refuses (exit 2) naming the coordinate and the collected range.
 */
import process from "node:process";
import { readArtifact } from "../report/latency_library.ts";
import {
  LatencyPredictor,
  OutsideDomainError,
  type PredictMethod,
} from "../report/latency_predictor.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { InputError, runCli } from "./run_cli.ts";

const SPEC = {
  library: { type: "list", help: "benchmark artifact(s), comma-separated" },
  batch: { type: "number", integer: true, min: 1, help: "requests in the step" },
  kv: { type: "number", integer: true, min: 0, default: 0, help: "KV tokens the step reads" },
  prefillTokens: { type: "number", integer: true, min: 1, help: "new tokens of a prefill step" },
  regime: { type: "list", help: "only rows of these kv_seed_regime values (default: all)" },
  method: {
    type: "string",
    values: ["grid", "fit", "both"],
    default: "both",
    help: "how to predict",
  },
} as const;

await runCli(() => {
  const opts = parseArgs(
    "predict",
    "Predicts a step's wall time from a latency library (no extrapolation).",
    SPEC,
    process.argv.slice(2),
  );
  if (!opts.library?.length) throw new UsageError("--library is required");
  if (opts.batch === undefined) throw new UsageError("--batch is required");
  const artifacts = opts.library.map((p) => {
    try {
      return readArtifact(userPath(p));
    } catch (err) {
      throw new InputError((err as Error).message);
    }
  });
  const predictor = LatencyPredictor.fromArtifacts(artifacts, { regimes: opts.regime });
  const methods: PredictMethod[] = opts.method === "both"
    ? ["grid", "fit"]
    : [opts.method as PredictMethod];
  const T = opts.prefillTokens;
  const what = T === undefined
    ? `decode: batch ${opts.batch}, KV ${opts.kv}`
    : `prefill: batch ${opts.batch}, ${T} tokens, KV read ${opts.kv}`;
  console.log(
    `${what} (${predictor.rows.length} library rows${
      opts.regime ? `, regimes ${opts.regime.join(",")}` : ""
    })`,
  );
  let refused = 0;
  for (const method of methods) {
    try {
      const p = T === undefined
        ? predictor.decode(opts.batch, opts.kv, method)
        : predictor.prefill(T, { kv: opts.kv, batch: opts.batch }, method);
      console.log(`  ${method.padEnd(4)} ${p.wallMs.toFixed(3)} ms`);
    } catch (err) {
      if (!(err instanceof OutsideDomainError)) {
        if (/must be|>=/.test((err as Error).message)) throw new InputError((err as Error).message);
        throw err;
      }
      refused++;
      console.error(`  ${method.padEnd(4)} refused: outside the collected domain: ${err.message}`);
    }
  }
  const fit = T === undefined ? predictor.decodeFit : predictor.prefillFit;
  if (fit) {
    console.log(
      `  fit: wall_ms = ${
        fit.terms.map((t, i) =>
          `${fit.coefficients[i].toPrecision(4)}${t === "1" ? "" : ` * ${t}`}`
        ).join(" + ")
      }` +
        ` (${fit.n} rows, rmse ${fit.rmseMs.toFixed(3)} ms, ${
          fit.mapePct.toFixed(1)
        }% MAPE in-sample)`,
    );
  }
  return refused === methods.length ? 2 : 0;
});
