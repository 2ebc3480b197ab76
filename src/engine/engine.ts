/**
 * The engine: requests in, tokens out, one step at a time. Each step is
 * schedule -> StepBatch -> `model.forward` -> update when its sampled tokens arrive.
 *
 * Synchronous mode completes each step before scheduling the next. Async mode
 * (`asyncScheduling`) schedules step N+1 while step N runs: a decode input that step N
 * samples is passed as a `prevSampleRef` (it stays on the GPU), and its slot in the
 * request is a placeholder until the token arrives. A request that turns out to have
 * stopped in step N finishes when that token arrives, and the token its extra step N+1
 * sampled is discarded. Both modes give the same tokens.
 *
 * Benchmark hooks (the engine's named interface for `bench`): `injectRunning` (fake KV),
 * `registerShadow` (borrow a parked chain's KV), `park`, `shed` (the normal finish path,
 * behind the deferred-free fence), `onStep` (every step's sums and times), `drain`.
 *
 * ```ts
 * const engine = new Engine(model, { maxNumSeqs: 8 });
 * const req = engine.addRequest([1, 2, 3], { maxTokens: 4 }, {
 *   onOutput: ({ tokenId, finished }) => console.log(tokenId, finished),
 * });
 * await engine.runUntilDone();
 * req.outputTokenIds; // 4 tokens (fewer if EOS came first)
 * ```
 */
import type { KvCacheUsage } from "../kv/kv_cache_manager.ts";
import { KvCacheManager } from "../kv/kv_cache_manager.ts";
import type { ForwardModel, PreparedStep, StepBatch, StepOutput } from "../model/step_batch.ts";
import { type EngineConfig, engineConfig } from "./engine_config.ts";
import { type GenerationParams, generationParams } from "./generation_params.ts";
import { type OutputCallback, Request } from "./request.ts";
import { Scheduler } from "./scheduler.ts";
import type { SchedulerOutput } from "./scheduler_output.ts";
import { buildStepBatch } from "./step_batch_builder.ts";
import { type StepObservation, type StepSums, stepSums } from "./step_observation.ts";

/** Options of a request beyond its params. */
export interface AddRequestOptions {
  /** Id (unique among unfinished requests); default `req-<n>`. */
  readonly requestId?: string;
  /** Streaming callback: every arrived token, then the finish. */
  readonly onOutput?: OutputCallback;
  /** Park instead of freeing when generation ends while running (a kvwarm chain). */
  readonly parkOnFinish?: boolean;
}

/** Options of a shadow registration. */
export interface ShadowOptions extends AddRequestOptions {
  /** Tokens the shadow may decode past `numComputedTokens + 1` without allocating (default 0). */
  readonly headroomTokens?: number;
  /** Copy the chain's partial block into the private tail (default true); else a fresh tail. */
  readonly cow?: boolean;
}

/** Options of one Engine.step call. */
export interface StepOptions {
  /**
   * The step this call issues with nothing in flight goes to the GPU in one submit
   * (StepBatch.oneSubmit), not in groups: the benchmark's untimed decode admission. Grouped,
   * it started on the GPU while the host still encoded it and finished while the host encoded
   * the first steady step; its output was then seen up to 2 ms late, and that steady step's
   * gap read 4-12% below its GPU time at batch 1-8 on the H200.
   */
  readonly oneSubmit?: boolean;
  /**
   * Async mode, with nothing in flight and a model that can prepare steps
   * (ForwardModel.prepare): schedule and encode this step and the next before submitting either,
   * then submit both. The host is then idle while they run, so the first step's output is seen
   * when it arrives: the benchmark's decode admission, whose arrival starts the first timed
   * step's gap. Encoded behind the admission's submit, that step (4-5 ms of host work at batch
   * 1 on a slow host) outlasted the admission on the GPU (4.0 ms), and single-sample batch-1
   * and -2 walls read 0.85-0.95x their GPU time on the H200 (session 39).
   */
  readonly withNext?: boolean;
}

/** Called with every completed step. */
export type StepObserver = (observation: StepObservation) => void;

interface ScheduledStep {
  readonly output: SchedulerOutput;
  readonly batch: StepBatch;
  readonly sums: StepSums;
  readonly scheduleEndMs: number;
}

interface InFlightStep {
  readonly output: SchedulerOutput;
  readonly sums: StepSums;
  readonly scheduleEndMs: number;
  readonly submittedMs: number;
  readonly arrival: Promise<readonly [Int32Array, number]>;
  readonly gpuMs: Promise<number | null>;
  readonly submitCallMs: number | null;
}

/** The engine over one model: see the module doc above. */
export class Engine {
  /** The validated, frozen configuration. */
  readonly config: EngineConfig;
  /** The KV cache manager (pool accounting, block tables). */
  readonly kv: KvCacheManager;
  /** The scheduler (waiting, running, parked). */
  readonly scheduler: Scheduler;
  readonly #inFlight: InFlightStep[] = [];
  readonly #observers = new Set<StepObserver>();
  #numAdded = 0;
  #stepping = false;

  /** Builds the KV pool from the model's block size and count, and the scheduler. */
  constructor(readonly model: ForwardModel, config: Partial<EngineConfig> = {}) {
    this.config = engineConfig(model, config);
    if (!Number.isInteger(model.vocabSize) || model.vocabSize < 1) {
      throw new Error(`model vocabSize must be a positive integer, got ${model.vocabSize}`);
    }
    this.kv = new KvCacheManager({
      numBlocks: model.numBlocks,
      blockSize: model.blockSize,
      enablePrefixCaching: this.config.enablePrefixCaching,
      watermark: this.config.watermark,
    });
    this.scheduler = new Scheduler(this.config, this.kv, model.eosTokenIds);
  }

  /**
   * Sets the token budget of the steps scheduled from now on (null: the config's
   * `maxNumBatchedTokens` again), at most the tokens the model's step holds: kvwarm's untimed
   * chain stages prefill in steps larger than the measured ones' budget.
   */
  setStepTokenBudget(tokens: number | null): void {
    if (tokens !== null) {
      const most = this.model.maxNumTokens ?? Infinity;
      if (!Number.isInteger(tokens) || tokens < 1 || tokens > most) {
        throw new Error(
          `step token budget ${tokens} must be an integer in 1..${most} (the model's step)`,
        );
      }
      if (!this.config.enableChunkedPrefill && tokens < this.config.maxModelLen) {
        throw new Error(
          `without chunked prefill the step token budget (${tokens}) must be >= maxModelLen ` +
            `(${this.config.maxModelLen}), or a long request could never be scheduled`,
        );
      }
    }
    this.scheduler.stepTokenBudget = tokens;
  }

  /** The token budget of the next step scheduled. */
  get stepTokenBudget(): number {
    return this.scheduler.stepTokenBudget ?? this.config.maxNumBatchedTokens;
  }

  /** Steps issued to the model whose output has not been applied yet. */
  get numInFlightSteps(): number {
    return this.#inFlight.length;
  }

  /** True while a request waits or runs, or a step is in flight (parked ones do not count). */
  hasUnfinishedRequests(): boolean {
    return this.scheduler.hasPendingWork() || this.#inFlight.length > 0;
  }

  /** An unfinished request (waiting, running or parked) by id. */
  getRequest(requestId: string): Request | undefined {
    return this.scheduler.requests.get(requestId);
  }

  /** KV pool accounting: total, free, cached, in use, pending frees. */
  kvUsage(): KvCacheUsage {
    return this.kv.usage();
  }

  /** The request's KV block ids, per KV group. */
  blockIds(requestId: string): number[][] {
    return this.kv.blockIds(requestId);
  }

  /** Forgets every prefix-cache entry; false while blocks are held or frees are fenced. */
  resetPrefixCache(): boolean {
    return this.kv.resetPrefixCache();
  }

  /**
   * Queues a request. Throws, naming the problem, for an empty prompt, a token outside
   * the vocabulary, a prompt longer than (or as long as) max_model_len, or one the KV
   * pool could never hold.
   */
  addRequest(
    prompt: ArrayLike<number>,
    params: Partial<GenerationParams> = {},
    options: AddRequestOptions = {},
  ): Request {
    const request = this.#newRequest(prompt, params, options);
    this.#checkFits(request.requestId, prompt.length);
    this.scheduler.addRequest(request);
    return request;
  }

  /**
   * Fake-KV injection (untimed): a request whose first `numComputedTokens` tokens count
   * as computed (their KV is whatever the blocks hold) goes straight into running, with
   * blocks for `numComputedTokens + 1` tokens, full blocks hashed and registered now.
   * Its next step computes position `numComputedTokens`. Returns null when the pool
   * cannot hold it (nothing taken).
   */
  injectRunning(
    prompt: ArrayLike<number>,
    numComputedTokens: number,
    params: Partial<GenerationParams> = {},
    options: AddRequestOptions = {},
  ): Request | null {
    const request = this.#newRequest(prompt, params, options);
    if (!Number.isInteger(numComputedTokens) || numComputedTokens < 0) {
      throw new Error(`numComputedTokens must be a non-negative integer, got ${numComputedTokens}`);
    }
    if (prompt.length < numComputedTokens + 1) {
      throw new Error(
        `an injected request with ${numComputedTokens} computed tokens needs a prompt of at ` +
          `least ${numComputedTokens + 1} tokens, got ${prompt.length}`,
      );
    }
    return this.scheduler.inject(request, numComputedTokens) ? request : null;
  }

  /**
   * Registers a shadow of the parked chain `chainId` (untimed admission window): its
   * prompt is the chain's first `numComputedTokens + 1` tokens, the chain's full blocks
   * below `numComputedTokens` are shared by refcount, and a private tail covers
   * `numComputedTokens + 1 + headroomTokens` tokens (copy-on-write of the chain's partial
   * block, or fresh). It goes straight into running with `ignoreEos` unless `params` say
   * otherwise, so steady steps allocate nothing. All or nothing across KV groups;
   * returns null when the pool cannot hold the tail.
   */
  registerShadow(
    chainId: string,
    numComputedTokens: number,
    params: Partial<GenerationParams> = {},
    options: ShadowOptions = {},
  ): Request | null {
    const chain = this.scheduler.parked.get(chainId);
    if (!chain) throw new Error(`chain ${chainId} is not parked`);
    if (!Number.isInteger(numComputedTokens) || numComputedTokens < 1) {
      throw new Error(`numComputedTokens must be a positive integer, got ${numComputedTokens}`);
    }
    if (chain.tokenIds.length < numComputedTokens + 1) {
      throw new Error(
        `chain ${chainId} has ${chain.tokenIds.length} tokens; a shadow at ` +
          `${numComputedTokens} needs ${numComputedTokens + 1}`,
      );
    }
    const headroom = options.headroomTokens ?? 0;
    if (!Number.isInteger(headroom) || headroom < 0) {
      throw new Error(`headroomTokens must be a non-negative integer, got ${headroom}`);
    }
    const hold = numComputedTokens + 1 + headroom;
    if (hold > this.config.maxModelLen) {
      throw new Error(
        `a shadow holding ${hold} tokens exceeds max_model_len ${this.config.maxModelLen}`,
      );
    }
    const prompt = chain.tokenIds.slice(0, numComputedTokens + 1);
    const shadow = this.#newRequest(prompt, { ignoreEos: true, ...params }, options);
    const ok = this.scheduler.registerShadow(
      shadow,
      chain,
      numComputedTokens,
      hold,
      options.cow ?? true,
    );
    return ok ? shadow : null;
  }

  /**
   * Parks a running request: it leaves running with its blocks resident. With tokens
   * in flight it stops being scheduled now and parks once they arrive (returns false).
   */
  park(requestId: string): boolean {
    return this.scheduler.park(this.#get(requestId));
  }

  /**
   * Sheds a request (a benchmark chain or measured request) through the normal finish
   * path, from waiting, running or parked; blocks an in-flight step reads are freed when
   * it completes, and a token it still has in flight is discarded.
   */
  shed(requestId: string): void {
    this.#finish(requestId, "shed");
  }

  /** Aborts a request (same path as `shed`, reason "abort"). */
  abort(requestId: string): void {
    this.#finish(requestId, "abort");
  }

  /** Calls `observer` with every completed step; returns the unsubscribe function. */
  onStep(observer: StepObserver): () => void {
    this.#observers.add(observer);
    return () => this.#observers.delete(observer);
  }

  /**
   * Runs one step and returns its observation, or null when nothing could be scheduled
   * and nothing was in flight. Async mode keeps one step in flight between calls: each
   * call schedules the next step before applying the oldest one's output.
   */
  async step(options: StepOptions = {}): Promise<StepObservation | null> {
    if (this.#stepping) throw new Error("Engine.step() is already running: await it first");
    this.#stepping = true;
    try {
      if (this.#inFlight.length === 0) {
        if (options.withNext && this.config.asyncScheduling && this.model.prepare) {
          this.#issueWithNext(options.oneSubmit ?? false);
        } else this.#issue(options.oneSubmit ?? false);
      }
      if (this.config.asyncScheduling && this.#inFlight.length === 1) this.#issue();
      const oldest = this.#inFlight.shift();
      return oldest ? await this.#complete(oldest) : null;
    } finally {
      this.#stepping = false;
    }
  }

  /** Applies every step in flight without scheduling another. */
  async drain(): Promise<void> {
    if (this.#stepping) throw new Error("Engine.step() is running: await it first");
    this.#stepping = true;
    try {
      while (this.#inFlight.length > 0) await this.#complete(this.#inFlight.shift()!);
    } finally {
      this.#stepping = false;
    }
  }

  /** Steps until no request waits or runs and nothing is in flight. */
  async runUntilDone(): Promise<void> {
    while (this.hasUnfinishedRequests()) {
      const observation = await this.step();
      if (observation === null && this.hasUnfinishedRequests()) {
        throw new Error(
          `the engine cannot make progress: ${this.scheduler.waiting.length} waiting, ` +
            `${this.scheduler.running.length} running, nothing schedulable`,
        );
      }
    }
  }

  #issue(oneSubmit = false): void {
    const scheduled = this.#schedule(oneSubmit);
    if (scheduled) this.#launch(scheduled, this.model.forward(scheduled.batch));
  }

  /** Schedules and prepares two steps, then submits both (StepOptions.withNext). */
  #issueWithNext(oneSubmit: boolean): void {
    const first = this.#schedule(oneSubmit);
    if (!first) return;
    const prepared = this.model.prepare!(first.batch);
    let next: ScheduledStep | null;
    let nextPrepared: PreparedStep | null;
    try {
      next = this.#schedule(false);
      nextPrepared = next && this.model.prepare!(next.batch);
    } finally {
      this.#launch(first, prepared.launch());
    }
    if (next && nextPrepared) this.#launch(next, nextPrepared.launch());
  }

  #schedule(oneSubmit: boolean): ScheduledStep | null {
    const output = this.scheduler.schedule();
    this.#deliver();
    if (output === null) return null;
    const built = buildStepBatch(output, this.kv);
    const batch = oneSubmit ? { ...built, oneSubmit } : built;
    return { output, batch, sums: stepSums(output), scheduleEndMs: performance.now() };
  }

  #launch(step: ScheduledStep, forward: StepOutput): void {
    const { output, sums, scheduleEndMs } = step;
    const submittedMs = performance.now();
    const arrival = forward.sampled.then((s) => [s, performance.now()] as const);
    // Rejections surface when the step is completed; mark them handled until then.
    arrival.catch(() => {});
    forward.gpuMs.catch(() => {});
    this.#inFlight.push({
      output,
      sums,
      scheduleEndMs,
      submittedMs,
      arrival,
      gpuMs: forward.gpuMs,
      submitCallMs: forward.submitCallMs ?? null,
    });
  }

  async #complete(step: InFlightStep): Promise<StepObservation> {
    const [sampled, outputArrivalMs] = await step.arrival;
    this.scheduler.update(step.output, sampled);
    this.#deliver();
    const observation: StepObservation = {
      ...step.sums,
      scheduleEndMs: step.scheduleEndMs,
      submittedMs: step.submittedMs,
      outputArrivalMs,
      gpuMs: await step.gpuMs,
      submitCallMs: step.submitCallMs,
    };
    for (const observer of this.#observers) observer(observation);
    return observation;
  }

  #deliver(): void {
    for (const output of this.scheduler.takeOutputs()) output.request.onOutput!(output);
  }

  #finish(requestId: string, reason: "shed" | "abort"): void {
    this.scheduler.finish(this.#get(requestId), reason);
    this.#deliver();
  }

  #get(requestId: string): Request {
    const request = this.scheduler.requests.get(requestId);
    if (!request) throw new Error(`no unfinished request "${requestId}"`);
    return request;
  }

  #newRequest(
    prompt: ArrayLike<number>,
    params: Partial<GenerationParams>,
    options: AddRequestOptions,
  ): Request {
    const { maxModelLen } = this.config;
    if (prompt.length === 0) throw new Error("the prompt is empty");
    const ids = new Int32Array(prompt.length);
    for (let i = 0; i < prompt.length; i++) {
      const t = prompt[i];
      if (!Number.isInteger(t) || t < 0 || t >= this.model.vocabSize) {
        throw new Error(
          `prompt token ${t} at position ${i} is outside [0, ${this.model.vocabSize})`,
        );
      }
      ids[i] = t;
    }
    if (prompt.length > maxModelLen) {
      throw new Error(
        `the prompt has ${prompt.length} tokens, longer than max_model_len ${maxModelLen}`,
      );
    }
    if (prompt.length === maxModelLen) {
      throw new Error(
        `the prompt has ${prompt.length} tokens, as many as max_model_len: no room to generate`,
      );
    }
    const requestId = options.requestId ?? `req-${this.#numAdded}`;
    if (this.scheduler.requests.has(requestId)) {
      throw new Error(`request id "${requestId}" is already in use`);
    }
    const request = new Request(
      requestId,
      ids,
      generationParams(params),
      this.#numAdded++,
      options.onOutput ?? null,
    );
    request.parkOnFinish = options.parkOnFinish ?? false;
    return request;
  }

  #checkFits(requestId: string, numTokens: number): void {
    const need = Math.ceil(numTokens / this.kv.blockSize);
    const room = this.kv.pool.numUsableBlocks - this.kv.watermarkBlocks;
    if (need > room) {
      throw new Error(
        `request ${requestId}: its ${numTokens} prompt tokens need ${need} KV blocks of ` +
          `${this.kv.blockSize}; the pool has ${room} usable blocks above the watermark`,
      );
    }
  }
}
