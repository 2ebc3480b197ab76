/**
 * Per-kernel summary of one profiled step: the model's per-dispatch spans grouped by
 * label, beside the bytes and FLOPs the step cost model assigns to each label.
 *
 * ```ts
 * const rows = summarizeSpans(await model.lastStepSpans(), stepCost(config, "f16", shape), bw);
 * console.log(formatKernelProfile(rows));
 * ```
 */
import type { KernelSpan } from "../model/gpu_model.ts";
import type { StepCost } from "../model/step_cost.ts";
import { formatTable } from "../util/table.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { userPath } from "../util/user_path.ts";

/** One row per dispatch label. */
export interface KernelProfileRow {
  readonly label: string;
  readonly calls: number;
  readonly us: number;
  /** Share of the step's summed dispatch time. */
  readonly share: number;
  readonly bytes: number | null;
  readonly flops: number | null;
  readonly gbps: number | null;
  /** Achieved bytes/s over the measured read bandwidth. */
  readonly roofShare: number | null;
  readonly tflops: number | null;
}

/** Groups spans by label, largest total first. */
export function summarizeSpans(
  spans: readonly KernelSpan[],
  cost: StepCost | null,
  bandwidthBytesPerSecond: number | null,
): KernelProfileRow[] {
  const by = new Map<string, { calls: number; us: number }>();
  let total = 0;
  for (const s of spans) {
    const e = by.get(s.label) ?? { calls: 0, us: 0 };
    e.calls++;
    e.us += s.us;
    total += s.us;
    by.set(s.label, e);
  }
  return [...by.entries()].map(([label, e]) => {
    const c = cost?.byLabel.get(label) ?? null;
    const secs = e.us * 1e-6;
    const bps = c && secs > 0 ? c.bytes / secs : null;
    return {
      label,
      calls: e.calls,
      us: e.us,
      share: total > 0 ? e.us / total : 0,
      bytes: c?.bytes ?? null,
      flops: c?.flops ?? null,
      gbps: bps === null ? null : bps / 1e9,
      roofShare: bps !== null && bandwidthBytesPerSecond ? bps / bandwidthBytesPerSecond : null,
      tflops: c && secs > 0 && c.flops ? c.flops / secs / 1e12 : null,
    };
  }).sort((a, b) => b.us - a.us);
}

/** The profile as a text table. */
export function formatKernelProfile(rows: readonly KernelProfileRow[]): string {
  const f = (x: number | null, d: number) => (x === null ? "-" : x.toFixed(d));
  return formatTable(
    ["kernel", "calls", "total µs", "share", "MB moved", "GB/s", "% of roof", "TFLOP/s"],
    rows.map((r) => [
      r.label,
      String(r.calls),
      r.us.toFixed(1),
      (r.share * 100).toFixed(1) + "%",
      r.bytes === null ? "-" : (r.bytes / 1e6).toFixed(1),
      f(r.gbps, 0),
      r.roofShare === null ? "-" : (r.roofShare * 100).toFixed(0) + "%",
      f(r.tflops, 2),
    ]),
  );
}

/**
 * Prints one profiled step (title, summed ms, the table) and, with `json`, writes it as
 * `{...fields, summed_ms, rows, spans}`; with several profiled points each file is named
 * by its point (`FILE-TAG.json`).
 */
export function reportStepProfile(
  spans: readonly KernelSpan[],
  cost: StepCost | null,
  bandwidthBytesPerSecond: number | null,
  what: string,
  json?: {
    readonly path: string;
    readonly several: boolean;
    readonly tag: string;
    readonly fields: Readonly<Record<string, number>>;
  },
): void {
  const rows = summarizeSpans(spans, cost, bandwidthBytesPerSecond);
  const sum = spans.reduce((s, x) => s + x.us, 0);
  console.log(
    `\nkernel profile of ${what} (each dispatch in its own timed pass: ${
      (sum / 1000).toFixed(2)
    } ms summed)`,
  );
  console.log(formatKernelProfile(rows));
  if (!json) return;
  const file = json.several ? json.path.replace(/(\.json)?$/, `-${json.tag}.json`) : json.path;
  writeJsonAtomic(userPath(file), { ...json.fields, summed_ms: sum / 1000, rows, spans });
}
