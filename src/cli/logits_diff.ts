/**
 * `deno task logits-diff A.safetensors B.safetensors [--json FILE] [--max-mean-abs X]
 * [--min-argmax-agree F]`: how two `deno task logits` files of the same prompt differ (one kernel
 * form against another, f16 against f32, one GPU against another): mean and largest |a - b|,
 * where the largest is, b's spread, and at how many positions the greedy token agrees.
 *
 * Exit codes: 0 compared (and within the bounds given); 1 outside a bound given; 2 bad usage,
 * unreadable files, different prompts or shapes.
 *
 * ```sh
 * deno task logits --model synthetic:qwen3-30b-a3b --dtype f16 --token-ids 1,2,3 --out a.safetensors
 * deno task logits --model synthetic:qwen3-30b-a3b --dtype f16 --token-ids 1,2,3 \
 *   --moe-tc-decode-rows -1 --out b.safetensors
 * deno task logits-diff a.safetensors b.safetensors --min-argmax-agree 0.9
 * ```
 */
import process from "node:process";
import { compareLogitsFiles, type LogitsComparison } from "../model/logits_compare.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, UsageError } from "./args.ts";
import { InputError, runCli } from "./run_cli.ts";

const SPEC = {
  json: { type: "string", help: "also write the comparison as JSON to this file" },
  maxMeanAbs: {
    type: "number",
    min: 0,
    help: "exit 1 when the mean |a - b| is above this",
  },
  minArgmaxAgree: {
    type: "number",
    min: 0,
    max: 1,
    help: "exit 1 when the share of positions with the same argmax is below this (0-1)",
  },
} as const;

await runCli(() => {
  const opts = parseArgs(
    "logits-diff",
    "How two logits files of the same prompt differ.",
    SPEC,
    process.argv.slice(2),
    "A.safetensors B.safetensors",
  );
  if (opts._.length !== 2) {
    throw new UsageError("name two logits files: A.safetensors B.safetensors");
  }
  const [a, b] = opts._.map((p) => userPath(p));
  let d: LogitsComparison;
  try {
    d = compareLogitsFiles(a, b);
  } catch (err) {
    throw new InputError((err as Error).message);
  }
  const share = d.tokens > 0 ? d.argmaxAgree / d.tokens : 1;
  console.log(
    `${d.tokens} positions x ${d.vocab}: mean |a - b| ${d.meanAbsDiff.toExponential(3)}, ` +
      `max ${
        d.maxAbsDiff.toExponential(3)
      } (position ${d.maxAt.position}, token ${d.maxAt.tokenId}); ` +
      `std of b ${d.stdB.toFixed(4)}`,
  );
  console.log(
    `argmax equal at ${d.argmaxAgree} of ${d.tokens} positions` +
      (d.argmaxDiffer.length ? ` (differs at ${d.argmaxDiffer.join(", ")})` : ""),
  );
  if (d.nonFinitePositions > 0) {
    console.log(`${d.nonFinitePositions} positions hold a non-finite value in a or b`);
  }
  if (opts.json) {
    writeJsonAtomic(userPath(opts.json), { a, b, ...d, argmaxAgreeShare: share });
  }
  const failed: string[] = [];
  if (opts.maxMeanAbs !== undefined && d.meanAbsDiff > opts.maxMeanAbs) {
    failed.push(`mean |a - b| ${d.meanAbsDiff} > ${opts.maxMeanAbs}`);
  }
  if (opts.minArgmaxAgree !== undefined && share < opts.minArgmaxAgree) {
    failed.push(`argmax agreement ${share.toFixed(4)} < ${opts.minArgmaxAgree}`);
  }
  if (
    d.nonFinitePositions > 0 && (opts.maxMeanAbs !== undefined || opts.minArgmaxAgree !== undefined)
  ) {
    failed.push(`${d.nonFinitePositions} positions hold non-finite values`);
  }
  for (const f of failed) console.error(`logits-diff: outside the bound: ${f}`);
  return failed.length ? 1 : 0;
});
