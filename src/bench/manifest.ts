/**
 * The explicit points manifest, `schema_version: 1`, parsed strictly: unknown fields,
 * wrong types, zero or negative sizes, `T < B`, `0 < K < B`, decode `K < B` and
 * duplicate points are errors that name the point and the field. Every problem is
 * reported at once.
 *
 * ```json
 * {"schema_version": 1,
 *  "prefill": [{"batch_size": 4, "total_prefill_tokens": 4096, "total_kv_read_tokens": 0}],
 *  "decode":  [{"batch_size": 8, "total_kv_read_tokens": 65536}]}
 * ```
 */
import type { DecodePoint, PrefillPoint } from "./artifact.ts";
import { decodePoint, pointKey, prefillPoint } from "./point.ts";

/** The manifest's schema version. */
export const MANIFEST_SCHEMA_VERSION = 1;

/** A parsed manifest: its points in file order. */
export interface Manifest {
  /** Prefill points. */
  readonly prefill: readonly PrefillPoint[];
  /** Decode points. */
  readonly decode: readonly DecodePoint[];
}

/** A manifest that breaks the schema; `problems` lists every one. */
export class ManifestError extends Error {
  /** One line per problem, each naming the point and field. */
  readonly problems: readonly string[];

  /** `source` names the file in the message. */
  constructor(source: string, problems: readonly string[]) {
    super(`${source}: ${problems.length} problem(s):\n  ${problems.join("\n  ")}`);
    this.name = "ManifestError";
    this.problems = problems;
  }
}

const TOP_FIELDS = ["schema_version", "prefill", "decode"];
const PREFILL_FIELDS = ["batch_size", "total_prefill_tokens", "total_kv_read_tokens"] as const;
const DECODE_FIELDS = ["batch_size", "total_kv_read_tokens"] as const;

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "string") return `the string ${JSON.stringify(v)}`;
  if (typeof v === "number" && !Number.isInteger(v)) return `the fraction ${v}`;
  return typeof v === "object" ? "an object" : `${typeof v} ${String(v)}`;
}

/** Parses manifest JSON text; throws {@link ManifestError} listing every problem. */
export function parseManifest(text: string, source = "manifest"): Manifest {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ManifestError(source, [`not valid JSON: ${(err as Error).message}`]);
  }
  return checkManifest(raw, source);
}

/** Checks an already parsed manifest value; throws {@link ManifestError}. */
export function checkManifest(raw: unknown, source = "manifest"): Manifest {
  const problems: string[] = [];
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new ManifestError(source, [`the manifest must be a JSON object, got ${describe(raw)}`]);
  }
  const top = raw as Record<string, unknown>;
  for (const key of Object.keys(top)) {
    if (!TOP_FIELDS.includes(key)) {
      problems.push(`unknown field "${key}" (known: ${TOP_FIELDS.join(", ")})`);
    }
  }
  if (!("schema_version" in top)) problems.push(`schema_version is missing (it must be 1)`);
  else if (top.schema_version !== MANIFEST_SCHEMA_VERSION) {
    problems.push(`schema_version must be 1, got ${describe(top.schema_version)}`);
  }
  const prefill: PrefillPoint[] = [];
  const decode: DecodePoint[] = [];
  const seen = new Map<string, string>();
  for (const kind of ["prefill", "decode"] as const) {
    if (!(kind in top)) continue;
    const list = top[kind];
    if (!Array.isArray(list)) {
      problems.push(`${kind} must be an array of points, got ${describe(list)}`);
      continue;
    }
    list.forEach((entry, i) => {
      const at = `${kind}[${i}]`;
      const fields = kind === "prefill" ? PREFILL_FIELDS : DECODE_FIELDS;
      if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
        problems.push(`${at}: a point must be an object, got ${describe(entry)}`);
        return;
      }
      const e = entry as Record<string, unknown>;
      const before = problems.length;
      for (const key of Object.keys(e)) {
        if (!(fields as readonly string[]).includes(key)) {
          problems.push(`${at}: unknown field "${key}" (a ${kind} point has ${fields.join(", ")})`);
        }
      }
      const num: Record<string, number> = {};
      for (const f of fields) {
        const v = e[f];
        if (!(f in e)) problems.push(`${at}.${f}: missing`);
        else if (typeof v !== "number" || !Number.isSafeInteger(v)) {
          problems.push(`${at}.${f}: must be an integer, got ${describe(v)}`);
        } else if (f === "total_kv_read_tokens" ? v < 0 : v <= 0) {
          problems.push(
            `${at}.${f}: must be ${f === "total_kv_read_tokens" ? ">= 0" : "> 0"}, got ${v}`,
          );
        } else num[f] = v;
      }
      if (problems.length > before) return;
      const B = num.batch_size, K = num.total_kv_read_tokens;
      if (kind === "prefill") {
        const T = num.total_prefill_tokens;
        if (T < B) {
          problems.push(
            `${at}.total_prefill_tokens: ${T} < batch_size ${B}: every request computes at least one new token`,
          );
        }
        if (K > 0 && K < B) {
          problems.push(
            `${at}.total_kv_read_tokens: ${K} is between 0 and batch_size ${B}: a KV-read point gives every request at least one block`,
          );
        }
        if (problems.length > before) return;
        prefill.push(prefillPoint(B, T, K));
      } else {
        if (K < B) {
          problems.push(
            `${at}.total_kv_read_tokens: ${K} < batch_size ${B}: every decode request reads at least one KV token`,
          );
          return;
        }
        decode.push(decodePoint(B, K));
      }
      const key = pointKey(kind === "prefill" ? prefill.at(-1)! : decode.at(-1)!);
      const first = seen.get(key);
      if (first) problems.push(`${at}: duplicate of ${first} (${key})`);
      else seen.set(key, at);
    });
  }
  if (problems.length === 0 && prefill.length === 0 && decode.length === 0) {
    problems.push("the manifest has no points (give a non-empty prefill or decode list)");
  }
  if (problems.length > 0) throw new ManifestError(source, problems);
  return { prefill, decode };
}
