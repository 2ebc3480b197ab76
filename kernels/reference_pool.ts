/**
 * CPU references computed ahead, in worker threads, while the GPU validates earlier cases.
 * Production-shaped references take seconds to minutes each in plain TypeScript (a
 * Qwen3-30B-A3B MoE gate/up for 1024 tokens: 81 s on the H200's host), so one thread made
 * `validate` outlast the time a lent GPU machine gives a call. A worker draws the case's
 * inputs itself from the case's seed (`caseInputs`), computes the reference and returns it
 * with the inputs' fingerprint; `validateCase` uses it only when its own inputs have the same
 * fingerprint, and computes inline otherwise. Jobs run in the order they are requested, at
 * most `2 x workers` computed ahead of the one being validated (large inputs live in the
 * workers only while their job runs). Deno only (Web Workers); elsewhere `create` returns null
 * and references stay inline.
 *
 * ```ts
 * const pool = ReferencePool.create(4);
 * pool?.request({ kernel: "gemm", caseIndex: 3, variant: "f16" });
 * await validateCase(gpu, gemm, gemm.cases[3], f16, 10, pool ?? undefined);
 * pool?.close();
 * ```
 */
import type { HostArray } from "./case.ts";
import type { ReferenceSource } from "./validate.ts";

/** One reference to compute: a case of a kernel as one variant (of its dtype) sees it. */
export interface ReferenceJob {
  readonly kernel: string;
  readonly caseIndex: number;
  readonly variant: string;
}

/** What a worker sends back. */
export interface ReferenceReply {
  readonly id: number;
  readonly fingerprint?: string;
  readonly expected?: Record<string, HostArray>;
  readonly error?: string;
}

interface Entry {
  readonly id: number;
  readonly job: ReferenceJob;
  readonly label: string;
  readonly dtype: string;
  result?: Promise<{ fingerprint: string; expected: Record<string, HostArray> }>;
  resolve?: (r: { fingerprint: string; expected: Record<string, HostArray> }) => void;
  reject?: (e: Error) => void;
}

/** Worker threads computing CPU references ahead (see the module doc above). */
export class ReferencePool implements ReferenceSource {
  readonly #workers: Worker[] = [];
  readonly #idle: Worker[] = [];
  readonly #queue: Entry[] = [];
  readonly #byKey = new Map<string, Entry>();
  readonly #running = new Map<number, Entry>();
  #ahead = 0;
  #nextId = 0;
  #closed = false;

  private constructor(readonly size: number) {
    for (let i = 0; i < size; i++) {
      const w = new Worker(new URL("./reference_worker.ts", import.meta.url).href, {
        type: "module",
      });
      w.onmessage = (e: MessageEvent<ReferenceReply>) => this.#done(w, e.data);
      w.onerror = (e: ErrorEvent) => {
        e.preventDefault();
        this.#failAll(new Error(`reference worker: ${e.message}`));
      };
      this.#workers.push(w);
      this.#idle.push(w);
    }
  }

  /**
   * A pool of `size` workers, or null where there are no module Web Workers (Node) or
   * `size < 1`.
   */
  static create(size: number): ReferencePool | null {
    const deno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";
    if (!deno || !(size >= 1) || typeof Worker === "undefined") return null;
    return new ReferencePool(Math.floor(size));
  }

  /** Queues `job`'s reference (`label` and `dtype` key it for `take`); repeats are ignored. */
  request(job: ReferenceJob, label: string, dtype: string): void {
    const key = keyOf(job.kernel, label, dtype);
    if (this.#closed || this.#byKey.has(key)) return;
    const entry: Entry = { id: this.#nextId++, job, label, dtype };
    entry.result = new Promise((resolve, reject) => {
      entry.resolve = resolve;
      entry.reject = reject;
    });
    entry.result.catch(() => {});
    this.#byKey.set(key, entry);
    this.#queue.push(entry);
    this.#pump();
  }

  /**
   * Settles when the reference of (kernel, label, dtype) is computed (or failed, or was never
   * requested): wait for it before timing anything that must not include CPU work.
   */
  ready(kernel: string, label: string, dtype: string): Promise<void> {
    const entry = this.#byKey.get(keyOf(kernel, label, dtype));
    if (!entry || this.#queue.includes(entry)) return Promise.resolve();
    return entry.result!.then(() => {}, () => {});
  }

  /** The requested reference of (kernel, label, dtype), or undefined if never requested. */
  take(
    kernel: string,
    label: string,
    dtype: string,
  ): Promise<{ fingerprint: string; expected: Record<string, HostArray> }> | undefined {
    const key = keyOf(kernel, label, dtype);
    const entry = this.#byKey.get(key);
    if (!entry) return undefined;
    this.#byKey.delete(key);
    const queued = this.#queue.indexOf(entry);
    if (queued >= 0) {
      // Not started (cannot happen while cases are taken in request order): compute inline.
      this.#queue.splice(queued, 1);
      return undefined;
    }
    // Taken: no longer counts against how far ahead the pool may run.
    this.#ahead--;
    this.#pump();
    // A failed worker job falls back to the inline reference (an undefined result).
    return entry.result!.catch(() => undefined as never);
  }

  /** Stops every worker; pending requests are dropped. */
  close(): void {
    this.#closed = true;
    for (const w of this.#workers) w.terminate();
    this.#failAll(new Error("reference pool closed"));
  }

  #pump(): void {
    while (!this.#closed && this.#idle.length && this.#queue.length) {
      if (this.#ahead >= 2 * this.size) return;
      const entry = this.#queue.shift()!;
      const w = this.#idle.pop()!;
      this.#ahead++;
      this.#running.set(entry.id, entry);
      w.postMessage({ id: entry.id, ...entry.job });
    }
  }

  #done(w: Worker, reply: ReferenceReply): void {
    const entry = this.#running.get(reply.id);
    this.#running.delete(reply.id);
    this.#idle.push(w);
    if (entry) {
      if (reply.error || !reply.expected || reply.fingerprint === undefined) {
        entry.reject!(new Error(reply.error ?? "reference worker: empty reply"));
      } else {
        entry.resolve!({ fingerprint: reply.fingerprint, expected: reply.expected });
      }
    }
    this.#pump();
  }

  #failAll(err: Error): void {
    for (const entry of this.#running.values()) entry.reject!(err);
    for (const entry of this.#queue) entry.reject!(err);
    this.#running.clear();
    this.#queue.length = 0;
  }
}

function keyOf(kernel: string, label: string, dtype: string): string {
  return `${kernel}\u0000${label}\u0000${dtype}`;
}
