/**
 * The progress line of a long sweep: points done / total, the current point, counts per
 * kv_seed_regime (skips included), and an ETA from the mean time per point of each
 * kind so far. A point's time runs from `start` to `finish`; the sweep starts it after a
 * kvwarm stage that precedes it (the stage logs its own seconds).
 *
 * ```ts
 * const p = new Progress(8);
 * p.start(1, "decode:B32:K130944");
 * p.finish("decode", "legacy");
 * p.line(); // "[1/8] decode:B32:K130944 | legacy=1 | ETA 0:42"
 * ```
 */
import type { PointKind } from "./artifact.ts";

/** Formats seconds as h:mm:ss or m:ss. */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const mm = h > 0 ? String(m).padStart(2, "0") : String(m);
  return `${h > 0 ? `${h}:` : ""}${mm}:${String(r).padStart(2, "0")}`;
}

/** Progress of a sweep (see the module doc above). */
export class Progress {
  readonly #regimes = new Map<string, number>();
  readonly #spent: Record<PointKind, { n: number; seconds: number }> = {
    prefill: { n: 0, seconds: 0 },
    decode: { n: 0, seconds: 0 },
  };
  readonly #remaining: Record<PointKind, number>;
  #done = 0;
  #current = "";
  #id = 0;
  #startedAt = 0;

  /**
   * @param total points planned
   * @param byKind points planned per kind (for the ETA)
   * @param now clock in ms (default performance.now)
   */
  constructor(
    readonly total: number,
    byKind: Readonly<Record<PointKind, number>> = { prefill: 0, decode: total },
    private readonly now: () => number = () => performance.now(),
  ) {
    this.#remaining = { ...byKind };
  }

  /** Points finished (measured or skipped). */
  get finished(): number {
    return this.#done;
  }

  /** Point `benchmarkId` starts. */
  start(benchmarkId: number, key: string): void {
    this.#id = benchmarkId;
    this.#current = key;
    this.#startedAt = this.now();
  }

  /** The current point finished with `regime` (or `skip:<...>`). */
  finish(kind: PointKind, regime: string): void {
    this.#done++;
    this.#regimes.set(regime, (this.#regimes.get(regime) ?? 0) + 1);
    this.#spent[kind].n++;
    this.#spent[kind].seconds += (this.now() - this.#startedAt) / 1000;
    this.#remaining[kind] = Math.max(0, this.#remaining[kind] - 1);
  }

  /** Seconds left at the mean pace per kind so far (null before any point finished). */
  eta(): number | null {
    let eta = 0;
    const all = this.#spent.prefill.n + this.#spent.decode.n;
    if (all === 0) return null;
    const mean = (this.#spent.prefill.seconds + this.#spent.decode.seconds) / all;
    for (const kind of ["prefill", "decode"] as const) {
      const s = this.#spent[kind];
      eta += this.#remaining[kind] * (s.n > 0 ? s.seconds / s.n : mean);
    }
    return eta;
  }

  /** The line: `[done/total] point | regime=n ... | ETA m:ss`. */
  line(): string {
    const regimes = [...this.#regimes].map(([r, n]) => `${r}=${n}`).join(" ") || "-";
    const eta = this.eta();
    return `[${this.#done}/${this.total}] #${this.#id} ${this.#current} | ${regimes} | ETA ${
      eta === null ? "?" : formatDuration(eta)
    }`;
  }
}
