/**
 * Command-line options declared once: parsing, defaults, validation and `--help` text all
 * come from one table, and an unknown flag is an error that lists the known ones.
 *
 * ```ts
 * const opts = parseArgs("validate", "Runs every kernel case.", {
 *   kernel: { type: "string", help: "comma-separated kernel names" },
 *   reps: { type: "number", default: 5, help: "timed dispatches per case" },
 * }, process.argv.slice(2));
 * opts.reps; // number
 * ```
 */
import process from "node:process";

export type OptionSpec =
  | { type: "string"; default?: string; help: string; values?: readonly string[] }
  | {
    type: "number";
    default?: number;
    help: string;
    integer?: boolean;
    min?: number;
    max?: number;
  }
  | { type: "boolean"; default?: boolean; help: string }
  | { type: "list"; default?: readonly string[]; help: string };

type ValueOf<S extends OptionSpec> = S extends { type: "string" } ? string
  : S extends { type: "number" } ? number
  : S extends { type: "boolean" } ? boolean
  : readonly string[];

export type Parsed<T extends Record<string, OptionSpec>> =
  & {
    [K in keyof T]: T[K] extends { default: unknown } ? ValueOf<T[K]> : ValueOf<T[K]> | undefined;
  }
  & { readonly _: readonly string[] };

/** A usage error: the CLI prints it with the help hint and exits with code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

const flagName = (key: string) => "--" + key.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase());

/** The --help text of a command (`positionals`: how its arguments read, when it takes any). */
export function helpText(
  command: string,
  summary: string,
  spec: Record<string, OptionSpec>,
  positionals?: string,
): string {
  const usage = `usage: deno task ${command} [options]${positionals ? ` ${positionals}` : ""}`;
  const lines = [usage, "", summary, "", "options:"];
  for (const [key, s] of Object.entries(spec)) {
    const arg = s.type === "boolean"
      ? ""
      : s.type === "list"
      ? " A,B,..."
      : ` ${s.type.toUpperCase()}`;
    const def = s.default === undefined
      ? ""
      : ` (default: ${Array.isArray(s.default) ? s.default.join(",") : String(s.default)})`;
    const values = s.type === "string" && s.values ? ` [${s.values.join("|")}]` : "";
    lines.push(`  ${(flagName(key) + arg).padEnd(30)} ${s.help}${values}${def}`);
  }
  lines.push(`  ${"--help".padEnd(30)} this text`);
  return lines.join("\n");
}

/**
 * Parses argv against the spec; prints help and exits 0 on --help. Arguments that are not
 * options are refused unless `positionals` says how they read (e.g. "A.json B.json"): a
 * forgotten flag (`validate rmsnorm`) or a space in a list (`--batch 1 8`) is an error, not
 * silently dropped.
 */
export function parseArgs<const T extends Record<string, OptionSpec>>(
  command: string,
  summary: string,
  spec: T,
  argv: readonly string[],
  positionals?: string,
): Parsed<T> {
  const out: Record<string, unknown> = {};
  const positional: string[] = [];
  for (const [key, s] of Object.entries(spec)) if (s.default !== undefined) out[key] = s.default;
  const byFlag = new Map(Object.keys(spec).map((k) => [flagName(k), k]));
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--help" || arg === "-h") {
      console.log(helpText(command, summary, spec, positionals));
      process.exit(0);
    }
    if (!arg.startsWith("--")) {
      if (positionals === undefined) {
        throw new UsageError(`unexpected argument '${arg}' (${command} takes options only)`);
      }
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const flag = eq >= 0 ? arg.slice(0, eq) : arg;
    const key = byFlag.get(flag);
    if (!key) {
      throw new UsageError(`unknown option ${flag}; known: ${[...byFlag.keys()].join(", ")}`);
    }
    const s = spec[key];
    if (s.type === "boolean") {
      const v = eq >= 0 ? arg.slice(eq + 1) : "true";
      if (v !== "true" && v !== "false") {
        throw new UsageError(`${flag} takes no value or true/false`);
      }
      out[key] = v === "true";
      continue;
    }
    const raw = eq >= 0 ? arg.slice(eq + 1) : argv[++i];
    if (raw === undefined) throw new UsageError(`${flag} needs a value`);
    if (s.type === "number") {
      const n = Number(raw);
      if (raw.trim() === "" || !Number.isFinite(n)) {
        throw new UsageError(`${flag}: '${raw}' is not a number`);
      }
      if (s.integer && !Number.isInteger(n)) {
        throw new UsageError(`${flag}: '${raw}' is not an integer`);
      }
      if (s.min !== undefined && n < s.min) throw new UsageError(`${flag}: ${n} is below ${s.min}`);
      if (s.max !== undefined && n > s.max) throw new UsageError(`${flag}: ${n} is above ${s.max}`);
      out[key] = n;
    } else if (s.type === "list") {
      out[key] = raw.split(",").map((x) => x.trim()).filter((x) => x.length);
    } else {
      if (s.values && !s.values.includes(raw)) {
        throw new UsageError(`${flag}: '${raw}' is not one of ${s.values.join(", ")}`);
      }
      out[key] = raw;
    }
  }
  out._ = positional;
  return out as Parsed<T>;
}

/** Parses a comma-separated list of distinct positive integers ("1,8,32"). */
export function intList(flag: string, values: readonly string[]): number[] {
  if (values.length === 0) throw new UsageError(`${flag}: nothing given`);
  const seen = new Set<number>();
  return values.map((v) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n <= 0) {
      throw new UsageError(`${flag}: '${v}' is not a positive integer`);
    }
    if (seen.has(n)) throw new UsageError(`${flag}: ${n} is given twice`);
    seen.add(n);
    return n;
  });
}

/**
 * Parses pairs of positive integers written AxB ("64x8192", "8x2048"); `what` names them
 * in the error (e.g. "BATCHxCTX").
 */
export function sizePairs(
  flag: string,
  values: readonly string[],
  what: string,
): [number, number][] {
  if (values.length === 0) throw new UsageError(`${flag}: nothing given`);
  const seen = new Set<string>();
  return values.map((v) => {
    const m = /^(\d+)x(\d+)$/.exec(v.trim());
    const a = m ? Number(m[1]) : 0, b = m ? Number(m[2]) : 0;
    if (!(a >= 1 && b >= 1)) {
      throw new UsageError(`${flag}: '${v}' is not ${what} with both at least 1`);
    }
    if (seen.has(`${a}x${b}`)) throw new UsageError(`${flag}: ${a}x${b} is given twice`);
    seen.add(`${a}x${b}`);
    return [a, b];
  });
}
