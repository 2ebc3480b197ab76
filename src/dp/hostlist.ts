/**
 * Slurm's compressed host lists (`SLURM_JOB_NODELIST`): `node[01-04,07],gpu3` names
 * node01, node02, node03, node04, node07 and gpu3. A bracket holds numbers and ranges;
 * a range keeps the zero padding of its lower bound; a name may hold several brackets
 * (`rack[1-2]-n[01-02]`: rack1-n01, rack1-n02, rack2-n01, rack2-n02).
 */
import { DpError } from "./dp_error.ts";

/** The most hosts {@link expandHostlist} writes out before refusing. */
export const MAX_EXPANDED_HOSTS = 65536;

interface NumberRange {
  lo: number;
  hi: number;
  width: number;
}
type Segment = { literal: string } | { ranges: NumberRange[] };

/**
 * The first host of a compressed host list, without expanding the rest.
 *
 * @example
 * ```ts
 * firstHost("node[01-04,07],gpu3"); // "node01"
 * ```
 */
export function firstHost(hostlist: string): string {
  const first = splitTopLevel(hostlist)[0];
  return parseName(first, hostlist)
    .map((s) => "literal" in s ? s.literal : pad(s.ranges[0].lo, s.ranges[0].width))
    .join("");
}

/**
 * Every host of a compressed host list, in Slurm's order.
 *
 * @example
 * ```ts
 * expandHostlist("node[01-02],gpu3"); // ["node01", "node02", "gpu3"]
 * ```
 */
export function expandHostlist(hostlist: string): string[] {
  const hosts: string[] = [];
  for (const name of splitTopLevel(hostlist)) {
    let partial = [""];
    for (const segment of parseName(name, hostlist)) {
      const count = "literal" in segment
        ? 1
        : segment.ranges.reduce((n, r) => n + r.hi - r.lo + 1, 0);
      if (hosts.length + partial.length * count > MAX_EXPANDED_HOSTS) {
        throw bad(hostlist, `expands to more than ${MAX_EXPANDED_HOSTS} hosts`);
      }
      const parts = "literal" in segment ? [segment.literal] : segment.ranges.flatMap((r) => {
        const out: string[] = [];
        for (let n = r.lo; n <= r.hi; n++) out.push(pad(n, r.width));
        return out;
      });
      partial = partial.flatMap((prefix) => parts.map((p) => prefix + p));
    }
    hosts.push(...partial);
  }
  return hosts;
}

function bad(hostlist: string, problem: string): DpError {
  return new DpError("config", `host list '${hostlist}' ${problem}`);
}

/** Splits at commas outside brackets. */
function splitTopLevel(hostlist: string): string[] {
  if (hostlist.trim() === "") throw bad(hostlist, "is empty");
  const names: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < hostlist.length; i++) {
    const c = hostlist[i];
    if (c === "[") {
      if (depth > 0) throw bad(hostlist, `has a nested '[' at offset ${i}`);
      depth++;
    } else if (c === "]") {
      if (depth === 0) throw bad(hostlist, `has an unmatched ']' at offset ${i}`);
      depth--;
    } else if (c === "," && depth === 0) {
      names.push(hostlist.slice(start, i));
      start = i + 1;
    }
  }
  if (depth !== 0) throw bad(hostlist, "has an unclosed '['");
  names.push(hostlist.slice(start));
  for (const name of names) {
    if (name.trim() === "") throw bad(hostlist, "has an empty host name");
  }
  return names;
}

function parseName(name: string, hostlist: string): Segment[] {
  const segments: Segment[] = [];
  const pattern = /\[([^\]]*)\]/g;
  let last = 0;
  for (const match of name.matchAll(pattern)) {
    if (match.index > last) segments.push({ literal: name.slice(last, match.index) });
    segments.push({ ranges: parseRanges(match[1], hostlist) });
    last = match.index + match[0].length;
  }
  if (last < name.length) segments.push({ literal: name.slice(last) });
  for (const s of segments) {
    if ("literal" in s && /\s/.test(s.literal)) {
      throw bad(hostlist, `has white space in host name '${name}'`);
    }
  }
  return segments;
}

function parseRanges(body: string, hostlist: string): NumberRange[] {
  return body.split(",").map((part) => {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw bad(hostlist, `has a bad range '${part}' (want N or N-M)`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) throw bad(hostlist, `has a descending range '${part}'`);
    return { lo, hi, width: m[1].length };
  });
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, "0");
}
