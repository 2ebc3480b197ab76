/**
 * One kvwarm stage: a rung's B chains built by the real scheduler. Chain i is a request
 * with the stable cache_salt (and id) `__kvwarm_{rank}_{i}`, the first `depth` tokens of
 * chain content i, `ignore_eos`, one output token, and `parkOnFinish`: the scheduler
 * chunk-prefills it like any prompt and, when its token arrives, parks it (out of
 * running, blocks resident, nothing in flight). Because the salt is stable and chain
 * content only extends, chain i of the next rung hits this rung's cached blocks and
 * computes only its extension (generational extension); the stage records how many
 * tokens were computed and how many reused.
 *
 * The stage fails (its points fall back to fake KV, with the reason) when the pool
 * cannot hold its chains and tails (`pool_shortfall`, also when a chain was preempted),
 * a chain vanishes (finished instead of parking), the soft timeout passes mid-build, or
 * the engine stops making progress. Chains are shed through the engine's finish path, so
 * blocks an in-flight step still reads are freed behind the deferred-free fence.
 *
 * ```ts
 * const stage = new ChainStage(rung, { engine, content, rank: 0 });
 * stage.start();
 * while (stage.phase === "building") stage.check(await driver.step(), late());
 * ```
 */
import type { Engine } from "../../engine/engine.ts";
import type { Request } from "../../engine/request.ts";
import type { StepObservation } from "../../engine/step_observation.ts";
import type { KvwarmStage } from "../artifact.ts";
import type { ChainContent } from "./chain_content.ts";
import type { Rung } from "./plan.ts";
import type { StagePhase } from "./stage_settlement.ts";

/** Chain i's cache_salt and request id on every rung: `__kvwarm_{rank}_{i}`. */
export function chainSalt(rank: number, chain: number): string {
  return `__kvwarm_${rank}_${chain}`;
}

/** What a stage works with. */
export interface ChainStageOptions {
  /** The engine (prefix caching on). */
  readonly engine: Engine;
  /** Chain content. */
  readonly content: ChainContent;
  /** This rank (in the chains' salts). */
  readonly rank: number;
  /** Tokens the engine's steps carry while the stage builds (its record says so; default the
   * engine's step budget). */
  readonly stepTokens?: number;
}

/** A rung's chains being built, built, or failed (see the module doc above). */
export class ChainStage {
  readonly #o: ChainStageOptions;
  readonly #chains: Request[] = [];
  #phase: Exclude<StagePhase, "none"> = "building";
  #reason: string | null = null;
  #t0 = 0;
  #seconds = 0;
  #steps = 0;
  #started = false;

  /** A stage of `rung` (nothing happens before {@link start}). */
  constructor(readonly rung: Rung, options: ChainStageOptions) {
    this.#o = options;
  }

  /** `building` until the build is done (ok or not). */
  get phase(): Exclude<StagePhase, "none"> {
    return this.#phase;
  }

  /** With phase `done`: whether every chain parked. */
  get ok(): boolean {
    return this.#phase === "done" && this.#reason === null;
  }

  /** Why the stage failed, or null. */
  get reason(): string | null {
    return this.#reason;
  }

  /** Chain i's request id. */
  chainId(i: number): string {
    return chainSalt(this.#o.rank, i);
  }

  /** The chains' requests (those added so far). */
  get chains(): readonly Request[] {
    return this.#chains;
  }

  /**
   * Checks the pool (chains plus the largest point's shadow tails above the watermark)
   * and adds the B chains; a shortfall fails the stage without adding any.
   */
  start(): void {
    if (this.#started) throw new Error(`stage batch=${this.rung.batch} already started`);
    this.#started = true;
    this.#t0 = performance.now();
    const { engine, content } = this.#o;
    const { batch, depth } = this.rung;
    const u = engine.kvUsage();
    const need = this.rung.chainBlocks + this.rung.tailBlocks;
    const room = u.free - u.watermarkBlocks;
    if (need > room) {
      this.fail(
        `pool_shortfall: ${batch} chains of ${depth} tokens and their shadow tails need ` +
          `${need} blocks; ${room} are free above the watermark`,
      );
      return;
    }
    for (let i = 0; i < batch; i++) {
      let prompt: Int32Array;
      try {
        prompt = content.tokens(i, depth);
      } catch (err) {
        this.fail(`chain_content: ${(err as Error).message}`);
        return;
      }
      const id = this.chainId(i);
      this.#chains.push(
        engine.addRequest(prompt, { maxTokens: 1, ignoreEos: true, cacheSalt: id }, {
          requestId: id,
          parkOnFinish: true,
        }),
      );
    }
  }

  /**
   * After an idle step (`observation` null when the engine ran nothing): the stage is
   * done when every chain parked; it fails when a chain vanished or was preempted, when
   * `late` (the soft timeout passed) before it is done, or when the engine made no
   * progress with nothing in flight.
   */
  check(observation: StepObservation | null, late: boolean): void {
    this.#steps++;
    if (this.#phase === "done") return;
    for (const c of this.#chains) {
      if (c.status === "finished") {
        return this.fail(`chain_vanished: ${c.requestId} finished (${c.finishReason})`);
      }
      if (c.numPreemptions > 0) {
        return this.fail(`pool_shortfall: chain ${c.requestId} was preempted mid-build`);
      }
    }
    if (this.#chains.every((c) => c.status === "parked")) {
      this.#phase = "done";
      this.#seconds = (performance.now() - this.#t0) / 1000;
      return;
    }
    if (late) return this.fail("soft_timeout: the soft timeout passed mid-build");
    if (observation === null && this.#o.engine.numInFlightSteps === 0) {
      this.fail("no_progress: the engine scheduled nothing while chains were unfinished");
    }
  }

  /**
   * How far the build is: tokens the chains hold (computed or reused, at most `depth` each) of
   * `batch x depth`, those of them this stage computed, and its seconds so far.
   */
  progress(): { tokens: number; total: number; computed: number; seconds: number } {
    const { batch, depth } = this.rung;
    let tokens = 0, computed = 0;
    for (const c of this.#chains) {
      const held = Math.min(c.numComputedTokens, depth);
      tokens += held;
      computed += Math.max(0, held - Math.max(0, c.numCachedTokens));
    }
    const seconds = this.#started ? (performance.now() - this.#t0) / 1000 : 0;
    return { tokens, total: batch * depth, computed, seconds };
  }

  /** Ends the build as failed with `reason` (chains stay until {@link shed}). */
  fail(reason: string): void {
    if (this.#phase === "done") return;
    this.#phase = "done";
    this.#reason = reason;
    this.#seconds = this.#started ? (performance.now() - this.#t0) / 1000 : 0;
  }

  /** A verdict from elsewhere (a peer rank's build failed): the stage is not usable. */
  overrule(reason: string): void {
    if (this.#reason === null) this.#reason = reason;
    this.#phase = "done";
  }

  /**
   * Sheds every chain still unfinished through the engine's finish path: chains `keep`
   * and up first, so that the blocks of chains the next rung reuses (0..keep-1) go to
   * the back of the free queue and are evicted last.
   */
  shed(keep = 0): void {
    const order = [
      ...this.#chains.slice(keep).reverse(),
      ...this.#chains.slice(0, keep),
    ];
    for (const c of order) {
      if (this.#o.engine.getRequest(c.requestId) === c) this.#o.engine.shed(c.requestId);
    }
  }

  /** The artifact's record of this stage, settled in step `settleRound` (null: never). */
  record(settleRound: number | null): KvwarmStage {
    let computed = 0, reused = 0;
    for (const c of this.#chains) {
      const hit = Math.max(0, c.numCachedTokens);
      reused += hit;
      computed += Math.max(0, c.numComputedTokens - hit);
    }
    return {
      batch: this.rung.batch,
      depth: this.rung.depth,
      build_seconds: this.#seconds,
      tokens_computed: computed,
      tokens_reused: reused,
      ok: this.ok,
      reason: this.#reason,
      chains: this.rung.batch,
      points: this.rung.points.length,
      blocks: this.rung.chainBlocks,
      tail_blocks: this.rung.tailBlocks,
      steps: this.#steps,
      step_tokens: this.#o.stepTokens ?? this.#o.engine.config.maxNumBatchedTokens,
      settle_round: settleRound,
    };
  }
}
