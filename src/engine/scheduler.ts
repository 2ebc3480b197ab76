import type { KvCacheManager } from "../kv/kv_cache_manager.ts";
import type { EngineConfig } from "./engine_config.ts";
import type { FinishReason, Request, RequestOutput } from "./request.ts";
import type { ScheduledRequest, SchedulerOutput } from "./scheduler_output.ts";

/**
 * The scheduler: owns `waiting`, `running` and the parked requests, and has one rule.
 * Each request has `numComputedTokens` and `numTokens`; each step closes the gap under a
 * token budget (`maxNumBatchedTokens`) and `maxNumSeqs`. Chunked prefill and decode are
 * the same loop: a long prompt takes what the budget leaves, a decode takes one token.
 *
 * Order: running requests first (in admission order), then waiting ones (FCFS) while
 * budget, sequences and KV blocks last. When a running request cannot get blocks, the
 * most recently admitted running request is preempted by recompute (its KV dropped, its
 * computed count reset, back to the front of waiting) until it fits; no request is
 * admitted in a step that preempted (unless nothing else was scheduled). While an
 * in-flight step still holds deferred frees, a request that cannot get blocks waits a
 * step instead of preempting more.
 *
 * A request stops by EOS (unless ignore_eos), max_tokens, max_model_len, abort, shed,
 * or kv_capacity (it cannot be admitted even with nothing else running or in flight).
 * A running request marked to park (a chain) parks instead of finishing.
 *
 * Prefix hits may name blocks that a step issued earlier, or this very step, writes:
 * the model must write every token's K/V of a layer before that layer's attention.
 */
export class Scheduler {
  /** Requests not yet running (new, or preempted), in admission order. */
  readonly waiting: Request[] = [];
  /** Requests that take part in steps, in admission order (all of status "running"). */
  readonly running: Request[] = [];
  /** Parked requests: blocks resident, out of running, nothing in flight. */
  readonly parked = new Map<string, Request>();
  /** Every request not finished, by id. */
  readonly requests = new Map<string, Request>();
  readonly #pendingParks = new Set<Request>();
  /** Streaming events not yet delivered (the engine delivers them once state is settled). */
  readonly #outbox: RequestOutput[] = [];

  /**
   * The token budget of the steps scheduled from now on, where it differs from the config's
   * `maxNumBatchedTokens` (Engine.setStepTokenBudget); null: the config's.
   */
  stepTokenBudget: number | null = null;

  /** A scheduler over `kv`; `eosTokenIds` end a request unless it ignores EOS. */
  constructor(
    readonly config: EngineConfig,
    readonly kv: KvCacheManager,
    readonly eosTokenIds: readonly number[],
  ) {}

  /** Queues a new request (validated by the engine). */
  addRequest(request: Request): void {
    if (this.requests.has(request.requestId)) {
      throw new Error(`request id "${request.requestId}" is already in use`);
    }
    request.status = "waiting";
    this.requests.set(request.requestId, request);
    this.waiting.push(request);
  }

  /** True while a request waits or runs (parked requests do not count). */
  hasPendingWork(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  /**
   * Decides the next step and issues it to the KV manager (its block copies, its fence).
   * Returns null, issuing nothing, when no request can make progress now.
   */
  schedule(): SchedulerOutput | null {
    const { kv, config } = this;
    const running = this.running;
    const picked: { request: Request; n: number }[] = [];
    let budget = this.stepTokenBudget ?? config.maxNumBatchedTokens;
    let numPreempted = 0;

    for (let i = 0; i < running.length && budget > 0;) {
      const request = running[i];
      const n = this.#numNewTokens(request, budget);
      if (n === 0) {
        i++;
        continue;
      }
      let ok = kv.allocateSlots(request, n) !== null;
      while (!ok && kv.usage().pendingFree === 0) {
        const victim = this.#pickVictim(i);
        if (victim < 0) break;
        this.#preempt(running.splice(victim, 1)[0]);
        numPreempted++;
        if (victim === i) break;
        ok = kv.allocateSlots(request, n) !== null;
      }
      if (ok) {
        picked.push({ request, n });
        budget -= n;
      }
      if (running[i] === request) i++;
    }

    // No admission in a step that preempted, unless nothing else could run at all.
    const admit = numPreempted === 0 || picked.length === 0;
    for (let w = 0; admit && w < this.waiting.length && budget > 0;) {
      if (running.length >= config.maxNumSeqs) break;
      const request = this.waiting[w];
      if (request.numOutputPlaceholders > 0) {
        w++; // its preempted step's token is still in flight
        continue;
      }
      const hit = kv.getComputedBlocks(request);
      const gap = request.numTokens - hit.numComputedTokens;
      const n = Math.min(gap, budget);
      if (n < gap && !config.enableChunkedPrefill) break;
      if (kv.allocateSlots(request, n, 0, hit) === null) {
        if (this.#canNeverFit(picked.length)) {
          this.finish(request, "kv_capacity");
          continue;
        }
        break;
      }
      this.waiting.splice(w, 1);
      if (request.numCachedTokens < 0) request.numCachedTokens = hit.numComputedTokens;
      request.numComputedTokens = hit.numComputedTokens;
      request.status = "running";
      running.push(request);
      picked.push({ request, n });
      budget -= n;
    }

    if (picked.length === 0) return null;
    const { stepId, blockCopies, blockZeros } = kv.beginStep(
      picked.map((p) => p.request.requestId),
    );
    const scheduled: ScheduledRequest[] = [];
    const sampleRequests: Request[] = [];
    let numScheduledTokens = 0;
    for (const { request, n } of picked) {
      const before = request.numComputedTokens;
      const known = request.tokenIds.length;
      let prevSampleRow = -1;
      if (before + n > known) {
        if (before !== known || request.lastSampleStepId !== stepId - 1) {
          throw new Error(
            `request ${request.requestId}: its input at position ${known} is a token ` +
              `sampled by step ${request.lastSampleStepId}, not by the previous step`,
          );
        }
        prevSampleRow = request.lastSampleRow;
      }
      let sampleRow = -1;
      if (before + n === request.numTokens) {
        sampleRow = sampleRequests.length;
        sampleRequests.push(request);
        request.numOutputPlaceholders++;
        request.lastSampleStepId = stepId;
        request.lastSampleRow = sampleRow;
      }
      request.numComputedTokens = before + n;
      request.lastStepId = stepId;
      numScheduledTokens += n;
      scheduled.push({
        request,
        numNewTokens: n,
        numComputedBefore: before,
        numKnownTokens: known,
        prevSampleRow,
        sampleRow,
        isDecode: n === 1 && before >= request.numPromptTokens,
      });
    }
    return {
      stepId,
      scheduled,
      numScheduledTokens,
      numPreempted,
      blockCopies,
      blockZeros,
      sampleRequests,
    };
  }

  /**
   * Applies a completed step: releases its fence, appends each arrived token (a request
   * finished or stopped meanwhile discards its token), registers newly full blocks,
   * checks stop conditions (a running request due to park parks instead of finishing),
   * and parks requests whose park was waiting for this step.
   */
  update(output: SchedulerOutput, sampled: Int32Array): void {
    if (sampled.length !== output.sampleRequests.length) {
      throw new Error(
        `step ${output.stepId} sampled ${sampled.length} tokens, ` +
          `${output.sampleRequests.length} were scheduled`,
      );
    }
    this.kv.completeStep(output.stepId);
    output.sampleRequests.forEach((request, row) => {
      if (request.status === "finished") return;
      request.numOutputPlaceholders--;
      // a token past a stop (a step scheduled before the stop was seen): discarded, but no
      // longer in flight, so a park waiting for the request to drain can happen
      if (request.stopped) return;
      const token = sampled[row];
      request.tokenIds.push(token);
      this.kv.cacheBlocks(request, request.numComputedTokens);
      const reason = this.#stopReason(request, token);
      if (request.onOutput) {
        this.#outbox.push({ request, tokenId: token, finished: reason !== null });
      }
      if (reason === null) return;
      if ((request.parkOnFinish || request.parkPending) && request.status === "running") {
        request.stopped = true;
        request.finishReason = reason;
        this.#parkWhenDrained(request);
      } else {
        this.#finish(request, reason, false);
      }
    });
    for (const request of this.#pendingParks) {
      if (!this.#inFlight(request)) this.#park(request);
    }
  }

  /** Takes the streaming events produced since the last call, in order. */
  takeOutputs(): RequestOutput[] {
    return this.#outbox.splice(0);
  }

  /** Ends a request from wherever it is; its blocks are freed behind the fence. */
  finish(request: Request, reason: FinishReason): void {
    this.#finish(request, reason, true);
  }

  #finish(request: Request, reason: FinishReason, announce: boolean): void {
    if (request.status === "finished") return;
    if (request.status === "waiting" || request.status === "preempted") {
      const at = this.waiting.indexOf(request);
      if (at >= 0) this.waiting.splice(at, 1);
    }
    if (request.status === "running") this.#removeRunning(request);
    request.status = "finished";
    if (!request.stopped) request.finishReason = reason;
    this.parked.delete(request.requestId);
    this.#pendingParks.delete(request);
    this.requests.delete(request.requestId);
    this.kv.free(request.requestId);
    if (announce && !request.stopped && request.onOutput) {
      this.#outbox.push({ request, tokenId: null, finished: true });
    }
  }

  /**
   * Parks a running request: out of running, blocks resident. With tokens in flight it
   * stops being scheduled now and parks when they have arrived (returns false then).
   */
  park(request: Request): boolean {
    if (request.status === "parked") return true;
    if (request.status !== "running") {
      throw new Error(
        `request ${request.requestId} is ${request.status}; only a running one parks`,
      );
    }
    return this.#parkWhenDrained(request);
  }

  /**
   * Fake-KV injection: a request whose first `numComputedTokens` tokens count as
   * computed goes straight into running (blocks for one more token, full blocks
   * registered now). Returns false when the pool cannot hold it.
   */
  inject(request: Request, numComputedTokens: number): boolean {
    this.#checkRoom(request);
    if (!this.kv.injectComputed(request, numComputedTokens)) return false;
    this.#startRunning(request, numComputedTokens);
    return true;
  }

  /**
   * Registers a shadow of the parked `chain` (see KvCacheManager.registerShadow) and puts
   * it straight into running at `numComputedTokens`. Returns false when the pool cannot
   * hold its tail (nothing taken).
   */
  registerShadow(
    shadow: Request,
    chain: Request,
    numComputedTokens: number,
    numTokensToHold: number,
    cow: boolean,
  ): boolean {
    if (chain.status !== "parked") {
      throw new Error(`chain ${chain.requestId} is ${chain.status}; shadows borrow parked chains`);
    }
    this.#checkRoom(shadow);
    if (!this.kv.registerShadow(shadow, chain, numComputedTokens, numTokensToHold, cow)) {
      return false;
    }
    this.#startRunning(shadow, numComputedTokens);
    return true;
  }

  #checkRoom(request: Request): void {
    if (this.requests.has(request.requestId)) {
      throw new Error(`request id "${request.requestId}" is already in use`);
    }
    if (this.running.length >= this.config.maxNumSeqs) {
      throw new Error(`running already holds maxNumSeqs = ${this.config.maxNumSeqs} requests`);
    }
  }

  #startRunning(request: Request, numComputedTokens: number): void {
    request.numComputedTokens = numComputedTokens;
    request.numCachedTokens = 0;
    request.status = "running";
    this.requests.set(request.requestId, request);
    this.running.push(request);
  }

  /** New tokens `request` may compute this step under `budget` (0: skip it). */
  #numNewTokens(request: Request, budget: number): number {
    if (request.parkPending || request.stopped) return 0;
    const p = request.params;
    if (request.numOutputTokens + request.numOutputPlaceholders >= p.maxTokens) return 0;
    if (request.numTokens >= this.config.maxModelLen) return 0;
    // Inputs must be known, except one token sampled by the step issued last (its
    // prevSampleRef); anything older is still unknown here: wait for it.
    const known = request.tokenIds.length;
    const computed = request.numComputedTokens;
    if (computed > known) return 0;
    if (computed === known && request.lastSampleStepId !== this.kv.lastIssuedStep) return 0;
    const gap = Math.min(request.numTokens, known + 1) - computed;
    if (gap <= 0) return 0;
    const n = Math.min(gap, budget);
    return n < gap && !this.config.enableChunkedPrefill ? 0 : n;
  }

  #stopReason(request: Request, token: number): FinishReason | null {
    if (!request.params.ignoreEos && this.eosTokenIds.includes(token)) return "stop";
    if (request.numOutputTokens >= request.params.maxTokens) return "length";
    if (request.tokenIds.length >= this.config.maxModelLen) return "length";
    return null;
  }

  /**
   * Index of the request to preempt so that `running[i]` fits: the most recently
   * admitted one at or after `i` (requests before `i` may already be in this step) that
   * is not waiting to park; -1 for none.
   */
  #pickVictim(i: number): number {
    for (let j = this.running.length - 1; j >= i; j--) {
      const r = this.running[j];
      if (!r.parkPending && !r.stopped) return j;
    }
    return -1;
  }

  #preempt(request: Request): void {
    this.kv.free(request.requestId);
    request.status = "preempted";
    request.numComputedTokens = 0;
    request.numPreemptions++;
    this.waiting.unshift(request);
  }

  /** A waiting request that fails to allocate with nothing else running or in flight never will. */
  #canNeverFit(numPicked: number): boolean {
    const u = this.kv.usage();
    return numPicked === 0 &&
      this.running.length === 0 &&
      this.kv.lastIssuedStep === this.kv.lastCompletedStep &&
      u.pendingFree === 0;
  }

  #inFlight(request: Request): boolean {
    return request.numOutputPlaceholders > 0 || request.lastStepId > this.kv.lastCompletedStep;
  }

  #parkWhenDrained(request: Request): boolean {
    if (this.#inFlight(request)) {
      request.parkPending = true;
      this.#pendingParks.add(request);
      return false;
    }
    this.#park(request);
    return true;
  }

  #removeRunning(request: Request): void {
    const at = this.running.indexOf(request);
    if (at >= 0) this.running.splice(at, 1);
  }

  #park(request: Request): void {
    this.#removeRunning(request);
    request.parkPending = false;
    request.status = "parked";
    this.#pendingParks.delete(request);
    this.parked.set(request.requestId, request);
  }
}
