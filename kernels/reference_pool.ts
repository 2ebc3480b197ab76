/**
 * CPU references computed ahead, in worker threads, while the GPU validates earlier cases.
 * Production-shaped references take seconds to minutes each in plain TypeScript (a
 * Qwen3-30B-A3B MoE gate/up for 1024 tokens: 81 s on the H200's host), so one thread made
 * `validate` outlast the time a lent GPU machine gives a call. A worker draws the case's
 * inputs itself from the case's seed (`caseInputs`), computes the reference and returns it
 * with the inputs' fingerprint; `validateCase` uses it only when its own inputs have the same
 * fingerprint, and computes inline otherwise. Jobs start in the order they are requested,
 * at most `2 x workers` started and not yet taken or released (large inputs live in a worker
 * only while its job runs). Every row that will read a reference requests it, and releases
 * it when done, read or not (a row that failed before reading it still frees it); the last
 * release forgets the reference and frees its slot. A worker that fails closes the pool:
 * every reference still pending is then computed inline.
 * Deno only (Web Workers); elsewhere `create` returns null and references stay inline.
 *
 * ```ts
 * const pool = ReferencePool.create(4)!;
 * pool.request({ kernel: "gemm", caseIndex: 3, variant: "f16" }, gemm.cases[3].label, "f16");
 * await pool.ready("gemm", gemm.cases[3].label, "f16");
 * await validateCase(gpu, gemm, gemm.cases[3], f16, { reps: 10, references: pool });
 * pool.release("gemm", gemm.cases[3].label, "f16");
 * pool.close();
 * ```
 */
import type { HostArray } from "./case.ts";
import type { ReferenceSource } from "./validate.ts";
import { referenceKey } from "./case_inputs.ts";

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

type Result = { fingerprint: string; expected: Record<string, HostArray> };

interface Entry {
  readonly id: number;
  readonly job: ReferenceJob;
  readonly key: string;
  /** Rows that requested the reference and have not released it. */
  uses: number;
  readonly result: Promise<Result>;
  resolve(r: Result): void;
  reject(e: Error): void;
  /** Counts against how far ahead the pool may run (started, not taken or released). */
  counted: boolean;
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
        this.#shutDown(new Error(`reference worker: ${e.message}`));
      };
      w.onmessageerror = () => this.#shutDown(new Error("reference worker: unreadable reply"));
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

  /**
   * Queues `job`'s reference for one more row (`label` and `dtype` key it); a key already
   * requested is computed once.
   */
  request(job: ReferenceJob, label: string, dtype: string): void {
    const key = referenceKey(job.kernel, label, dtype);
    if (this.#closed) return;
    const known = this.#byKey.get(key);
    if (known) {
      known.uses++;
      return;
    }
    let resolve!: (r: Result) => void, reject!: (e: Error) => void;
    const result = new Promise<Result>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    result.catch(() => {});
    const entry: Entry = {
      id: this.#nextId++,
      job,
      key,
      uses: 1,
      result,
      resolve,
      reject,
      counted: false,
    };
    this.#byKey.set(key, entry);
    this.#queue.push(entry);
    this.#pump();
  }

  /**
   * Settles when the reference of (kernel, label, dtype) is computed or failed (at once when
   * it was never requested): wait for it before timing GPU work. A queued reference always
   * starts: every slot ahead of it belongs to a row already taken or released.
   */
  ready(kernel: string, label: string, dtype: string): Promise<void> {
    const entry = this.#byKey.get(referenceKey(kernel, label, dtype));
    if (!entry) return Promise.resolve();
    return entry.result.then(() => {}, () => {});
  }

  /**
   * The reference of (kernel, label, dtype) once computed, or undefined (never requested,
   * released by every row that requested it, or failed: the caller computes it inline). May
   * be taken again until then.
   */
  take(kernel: string, label: string, dtype: string): Promise<Result> | undefined {
    const entry = this.#byKey.get(referenceKey(kernel, label, dtype));
    if (!entry) return undefined;
    this.#uncount(entry);
    return entry.result.catch(() => undefined as never);
  }

  /** One row is done with the reference of (kernel, label, dtype); the last forgets it. */
  release(kernel: string, label: string, dtype: string): void {
    const key = referenceKey(kernel, label, dtype);
    const entry = this.#byKey.get(key);
    if (!entry || --entry.uses > 0) return;
    this.#byKey.delete(key);
    const queued = this.#queue.indexOf(entry);
    if (queued >= 0) this.#queue.splice(queued, 1);
    this.#uncount(entry);
  }

  /** Stops every worker; references not yet computed come back as failures (inline). */
  close(): void {
    this.#shutDown(new Error("reference pool closed"));
  }

  #uncount(entry: Entry): void {
    if (!entry.counted) return;
    entry.counted = false;
    this.#ahead--;
    this.#pump();
  }

  #pump(): void {
    while (!this.#closed && this.#idle.length && this.#queue.length) {
      if (this.#ahead >= 2 * this.size) return;
      const entry = this.#queue.shift()!;
      const w = this.#idle.pop()!;
      entry.counted = true;
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
        entry.reject(new Error(reply.error ?? "reference worker: empty reply"));
      } else {
        entry.resolve({ fingerprint: reply.fingerprint, expected: reply.expected });
      }
    }
    this.#pump();
  }

  /** Closes the pool: workers stop, every pending reference fails (and is computed inline). */
  #shutDown(err: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const w of this.#workers) w.terminate();
    for (const entry of [...this.#running.values(), ...this.#queue]) entry.reject(err);
    this.#running.clear();
    this.#queue.length = 0;
  }
}
