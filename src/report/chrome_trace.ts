/**
 * One profiled step as Chrome trace-event JSON (the "JSON Object Format" that Perfetto
 * and chrome://tracing open): complete events (`ph: "X"`, `ts`/`dur` in µs), one track
 * (thread) per kernel family, named by metadata events, plus a track with the whole step.
 *
 * ```ts
 * writeFileSync("step.json", JSON.stringify(chromeTrace(spans, { title: "decode B=8 ctx=1024" })));
 * ```
 */
import type { SpanLike } from "./kernel_timings.ts";

/** One trace event (the fields this writer uses). */
export interface TraceEvent {
  readonly name: string;
  readonly ph: "X" | "M";
  readonly pid: number;
  readonly tid: number;
  readonly ts?: number;
  readonly dur?: number;
  readonly cat?: string;
  readonly args?: Readonly<Record<string, unknown>>;
}

/** The trace file's object. */
export interface ChromeTrace {
  readonly traceEvents: readonly TraceEvent[];
  readonly displayTimeUnit: "ms";
  readonly otherData: Readonly<Record<string, unknown>>;
}

/** Track order: families first in the order a layer runs them. */
const FAMILIES = ["step", "attention", "linear", "moe", "norm", "other"] as const;

/** The kernel family (track) of a dispatch label. */
export function kernelFamily(label: string): (typeof FAMILIES)[number] {
  if (label.startsWith("linear")) return "linear";
  if (/attention|qk_norm|kv_block_copy/.test(label)) return "attention";
  if (label.startsWith("moe")) return "moe";
  if (label.includes("norm")) return "norm";
  return "other";
}

/** The trace of one step's spans; `extra` per label lands in each event's args. */
export function chromeTrace(
  spans: readonly SpanLike[],
  options: {
    readonly title?: string;
    readonly extra?: ReadonlyMap<string, Readonly<Record<string, unknown>>>;
  } = {},
): ChromeTrace {
  if (spans.length === 0) throw new Error("chromeTrace: the step has no spans");
  const pid = 1;
  const tid = (family: string) => FAMILIES.indexOf(family as (typeof FAMILIES)[number]) + 1;
  const events: TraceEvent[] = [
    { name: "process_name", ph: "M", pid, tid: 0, args: { name: options.title ?? "webfpm step" } },
    ...FAMILIES.map((f) => ({
      name: "thread_name",
      ph: "M" as const,
      pid,
      tid: tid(f),
      args: { name: f },
    })),
    ...FAMILIES.map((f) => ({
      name: "thread_sort_index",
      ph: "M" as const,
      pid,
      tid: tid(f),
      args: { sort_index: tid(f) },
    })),
  ];
  let end = 0;
  for (const s of spans) {
    end = Math.max(end, s.startUs + s.us);
    events.push({
      name: s.label,
      cat: kernelFamily(s.label),
      ph: "X",
      pid,
      tid: tid(kernelFamily(s.label)),
      ts: s.startUs,
      dur: s.us,
      args: { kernel: s.kernel, ...(options.extra?.get(s.label) ?? {}) },
    });
  }
  const gpuUs = spans.reduce((sum, s) => sum + s.us, 0);
  events.push({
    name: options.title ?? "step",
    cat: "step",
    ph: "X",
    pid,
    tid: tid("step"),
    ts: 0,
    dur: end,
    args: { dispatches: spans.length, gpu_us: gpuUs },
  });
  return { traceEvents: events, displayTimeUnit: "ms", otherData: { source: "webfpm profile" } };
}
