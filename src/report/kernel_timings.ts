/**
 * Per-kernel timing summary of profiled steps: one row per dispatch label (the labels of
 * GpuModel's profile mode, which are also the keys of the step cost model), with calls,
 * GPU time, share of the step, bytes moved, achieved GB/s, % of the measured bandwidth
 * roof and FLOP/s. Plain JSON: `profile --json` writes it and `report --profile` draws it.
 *
 * ```ts
 * const summary = summarizeSpans([{ spans: await model.lastStepSpans(), cost: cost.byLabel }], {
 *   bandwidthGbps: 4200,
 * });
 * summary.rows[0]; // { label: "moe gate_up", us: 812.4, share: 0.41, gb_per_s: 3100, ... }
 * ```
 */

/** One dispatch's GPU time (the shape of GpuModel's KernelSpan). */
export interface SpanLike {
  readonly label: string;
  readonly kernel: string;
  readonly us: number;
  readonly startUs: number;
}

/** Bytes and FLOPs of the dispatches that share a label (the cost model's DispatchCost). */
export interface LabelCost {
  readonly calls: number;
  readonly bytes: number;
  readonly flops: number;
}

/** One profiled step: its spans and, when known, its cost per label. */
export interface ProfiledStep {
  readonly spans: readonly SpanLike[];
  readonly cost?: ReadonlyMap<string, LabelCost>;
}

/** One row: a dispatch label, averaged over the profiled steps. */
export interface KernelTimingRow {
  readonly label: string;
  /** Kernel (shader) names the label dispatched. */
  readonly kernels: readonly string[];
  /** Dispatches a step. */
  readonly calls: number;
  /** GPU µs a step (sum over its dispatches). */
  readonly us: number;
  /** Share of the step's GPU time. */
  readonly share: number;
  /** Bytes a step, from the cost model; null where it has no entry. */
  readonly bytes: number | null;
  readonly gb_per_s: number | null;
  /** Achieved GB/s as a percentage of the measured read bandwidth; null without one. */
  readonly roof_pct: number | null;
  readonly flops: number | null;
  readonly tflop_per_s: number | null;
}

/** The summary of a set of profiled steps of one shape. */
export interface KernelTimingSummary {
  readonly steps: number;
  /** Mean GPU µs of a step (sum of its dispatches). */
  readonly step_us: number;
  /** Measured read bandwidth the roof percentages divide by, or null. */
  readonly bandwidth_gbps: number | null;
  /** Rows by GPU time, largest first. */
  readonly rows: readonly KernelTimingRow[];
}

/** Averages the steps' spans per label and joins the cost model's bytes and FLOPs. */
export function summarizeSpans(
  steps: readonly ProfiledStep[],
  options: { readonly bandwidthGbps?: number | null } = {},
): KernelTimingSummary {
  if (steps.length === 0) throw new Error("summarizeSpans: no profiled steps");
  const bw = options.bandwidthGbps ?? null;
  if (bw !== null && !(bw > 0)) throw new Error(`bandwidth must be > 0 GB/s, got ${bw}`);
  const acc = new Map<
    string,
    {
      kernels: Set<string>;
      calls: number;
      us: number;
      bytes: number;
      flops: number;
      costed: number;
    }
  >();
  let totalUs = 0;
  for (const step of steps) {
    for (const s of step.spans) {
      if (!(s.us >= 0)) throw new Error(`span ${s.label}: bad duration ${s.us}`);
      const a = acc.get(s.label) ??
        { kernels: new Set<string>(), calls: 0, us: 0, bytes: 0, flops: 0, costed: 0 };
      a.kernels.add(s.kernel);
      a.calls++;
      a.us += s.us;
      totalUs += s.us;
      acc.set(s.label, a);
    }
    for (const [label, c] of step.cost ?? []) {
      const a = acc.get(label);
      if (!a) continue;
      a.bytes += c.bytes;
      a.flops += c.flops;
      a.costed++;
    }
  }
  const n = steps.length;
  const rows: KernelTimingRow[] = [...acc].map(([label, a]) => {
    const us = a.us / n;
    const costed = a.costed === n;
    const bytes = costed ? a.bytes / n : null;
    const flops = costed ? a.flops / n : null;
    const secs = us * 1e-6;
    const gbps = bytes !== null && secs > 0 ? bytes / secs / 1e9 : null;
    return {
      label,
      kernels: [...a.kernels].sort(),
      calls: a.calls / n,
      us,
      share: totalUs > 0 ? a.us / totalUs : 0,
      bytes,
      gb_per_s: gbps,
      roof_pct: gbps !== null && bw !== null ? (100 * gbps) / bw : null,
      flops,
      tflop_per_s: flops !== null && secs > 0 && flops > 0 ? flops / secs / 1e12 : null,
    };
  });
  rows.sort((a, b) => b.us - a.us || a.label.localeCompare(b.label));
  return { steps: n, step_us: totalUs / n, bandwidth_gbps: bw, rows };
}
