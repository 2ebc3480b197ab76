/**
 * The rank synchronizer: how N benchmark ranks agree on everything and stay in
 * lockstep. Rank 0 binds a ZeroMQ ROUTER, every other rank connects a DEALER with
 * routing id `String(rank)`. Every exchange is one round: each follower sends rank 0 a
 * request, rank 0 waits for all of them (and its own), checks them, and answers every
 * rank in the same round. Every wait has a timeout; any failure (a timeout, a malformed
 * or out-of-lockstep message, a rank's own error) is forwarded to every rank, so no
 * rank hangs, and leaves the synchronizer failed with its sockets closed.
 *
 * A group of one rank opens no socket: every round settles locally.
 *
 * This file holds the phases and what each round decides; the round itself (gather,
 * checks, answers, failure forwarding) is {@link GroupRounds}.
 */
import { iterationWalls, requireEqual, requireEqualShapes } from "./agreement.ts";
import { type CapacityEnvelope, negotiateCapacity, type NegotiatedCapacity } from "./capacity.ts";
import { DpError } from "./dp_error.ts";
import { GroupRounds } from "./group_rounds.ts";
import { PROTOCOL_VERSION, type RequestType, type ScheduledShape } from "./messages.ts";
import type { RankIdentity } from "./rank_identity.ts";
import type { RoundCost } from "./round_cost.ts";
import {
  settleStageRound,
  type StagePhase,
  stageSettledLine,
  type StageVerdict,
} from "./stage_round.ts";
import { CoordinatorLink, DEFAULT_SPIN_MS, FollowerLink, tcpEndpoint } from "./zmq_link.ts";

/** The default limit on every wait, ms (the reference design's 10 s). */
export const DEFAULT_DP_TIMEOUT_MS = 10_000;

/** Options of {@link RankSynchronizer.create} / {@link RankSynchronizer.open}. */
export interface SynchronizerOptions {
  /**
   * Limit on every wait for the group, ms. Default {@link DEFAULT_DP_TIMEOUT_MS}.
   * Followers wait up to a quarter longer (at most `FOLLOWER_GRACE_MS`, 2 s).
   */
  readonly timeoutMs?: number;
  /** Limit on the hello round (ranks starting up), ms. Default: `timeoutMs`. */
  readonly connectTimeoutMs?: number;
  /** Receives the log lines (one per settled stage). Default: none. */
  readonly log?: (line: string) => void;
  /**
   * Rank 0 only: the interface to bind. Default: the master host itself when it is an
   * IP address (`localhost` -> 127.0.0.1), else `*` (all interfaces: a cluster node's
   * name resolves to the address the other hosts use).
   */
  readonly bindHost?: string;
  /**
   * How long unsent messages (a last reply or abort) may delay closing, ms. Default
   * 1000; 0 may drop rank 0's last answer before a follower has it.
   */
  readonly lingerMs?: number;
  /**
   * How long a wait polls its socket on every macrotask before it sleeps 1 ms between
   * polls, ms. Longer: lower barrier latency when ranks arrive further apart, at the
   * price of a busy core while waiting. Default {@link DEFAULT_SPIN_MS}.
   */
  readonly spinMs?: number;
}

/** One rank's result of a point, as rank 0 gathers it. */
export interface RankResult {
  /** The rank. */
  readonly rank: number;
  /** Its measured wall times, seconds, one per sample. */
  readonly wall_times: readonly number[];
  /** Anything else the rank reports (its FPM rows), as JSON. */
  readonly data: unknown;
}

/** What {@link RankSynchronizer.gatherResult} returns. */
export interface GatheredResult {
  /** The point. */
  readonly benchmark_id: number;
  /** Per sample, the max wall over ranks, seconds (the group's step is its slowest rank's). */
  readonly iteration_walls: readonly number[];
  /** On rank 0: every rank's result, by rank. On other ranks: null. */
  readonly ranks: readonly RankResult[] | null;
}

/**
 * One rank's end of the group.
 *
 * @example A benchmark loop (each rank runs the same calls in the same order):
 * ```ts
 * const sync = await RankSynchronizer.open(resolveRank({ argv: process.argv, env: process.env }));
 * try {
 *   const capacity = await sync.negotiateCapacity(envelope);   // min envelope, kvwarm = all
 *   await sync.agreeGridDigest(gridDigest);
 *   for (const point of points) {
 *     await sync.ready(point.id, point.key);                   // all ranks ready: prepare
 *     // inject the point's requests, run the untimed admission step ...
 *     await sync.arm(point.id, scheduledShape);                // shapes equal: GO
 *     // time the steady step(s) ...
 *     const group = await sync.gatherResult(point.id, walls, rows);
 *     await sync.cleanup(point.id);
 *     if (await sync.boundaryVote(point.id, softTimeoutHit)) break;
 *   }
 *   await sync.finish();
 * } catch (err) {
 *   await sync.abort(err);   // tells the others; a no-op if the group already failed
 *   throw err;
 * }
 * ```
 * And every engine step, idle steps included, ends in `await sync.barrier(step)`.
 */
export class RankSynchronizer {
  /** This rank. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /**
   * Rank 0: the endpoint bound (with the real port). Followers: rank 0's endpoint.
   * A group of one: null.
   */
  readonly endpoint: string | null;

  readonly #rounds: GroupRounds;
  readonly #connectTimeoutMs: number;
  readonly #log: (line: string) => void;

  private constructor(
    identity: RankIdentity,
    link: CoordinatorLink | FollowerLink | null,
    options: SynchronizerOptions,
  ) {
    this.rank = identity.rank;
    this.size = identity.size;
    this.endpoint = link?.endpoint ?? null;
    const timeoutMs = options.timeoutMs ?? DEFAULT_DP_TIMEOUT_MS;
    this.#rounds = new GroupRounds(identity.rank, identity.size, link, timeoutMs);
    this.#connectTimeoutMs = options.connectTimeoutMs ?? timeoutMs;
    this.#log = options.log ?? (() => {});
  }

  /**
   * Opens this rank's socket (rank 0 binds, the others connect) without waiting for
   * anyone; {@link connect} runs the hello round. Port 0 on rank 0 binds any free port
   * ({@link port} tells which).
   */
  static async create(
    identity: RankIdentity,
    options: SynchronizerOptions = {},
  ): Promise<RankSynchronizer> {
    checkIdentity(identity);
    for (const [name, value] of Object.entries(options)) {
      const min = name === "lingerMs" || name === "spinMs" ? 0 : Number.MIN_VALUE;
      if (
        name.endsWith("Ms") &&
        !(typeof value === "number" && Number.isFinite(value) && value >= min)
      ) {
        throw new RangeError(
          `synchronizer option ${name} must be a ${
            min === 0 ? "non-negative" : "positive"
          } number of ms, got ${value}`,
        );
      }
    }
    const linkOptions = {
      lingerMs: options.lingerMs ?? 1000,
      spinMs: options.spinMs ?? DEFAULT_SPIN_MS,
    };
    let link: CoordinatorLink | FollowerLink | null = null;
    if (identity.size > 1 && identity.rank === 0) {
      const host = options.bindHost ?? defaultBindHost(identity.masterHost);
      const endpoint = tcpEndpoint(host, identity.masterPort);
      try {
        link = await CoordinatorLink.bind(endpoint, linkOptions);
      } catch (err) {
        throw new DpError("config", `rank 0 cannot bind ${endpoint}: ${(err as Error).message}`);
      }
    } else if (identity.size > 1) {
      const endpoint = tcpEndpoint(identity.masterHost, identity.masterPort);
      try {
        link = FollowerLink.connect(endpoint, identity.rank, linkOptions);
      } catch (err) {
        throw new DpError(
          "config",
          `rank ${identity.rank} cannot connect to ${endpoint}: ${(err as Error).message}`,
        );
      }
    }
    return new RankSynchronizer(identity, link, options);
  }

  /** {@link create} then {@link connect}: a synchronizer whose group is complete. */
  static async open(
    identity: RankIdentity,
    options: SynchronizerOptions = {},
  ): Promise<RankSynchronizer> {
    const sync = await RankSynchronizer.create(identity, options);
    await sync.connect();
    return sync;
  }

  /** The TCP port of {@link endpoint}, or null for a group of one. */
  get port(): number | null {
    const m = this.endpoint === null ? null : /:(\d+)$/.exec(this.endpoint);
    return m ? Number(m[1]) : null;
  }

  /** The error that failed the group, or null. */
  get failure(): DpError | null {
    return this.#rounds.failure;
  }

  /**
   * The hello round: every rank has connected and agrees on the group size. A rank that
   * never connects makes every rank fail with a timeout naming it.
   */
  async connect(): Promise<void> {
    this.#rounds.open();
    if (this.size === 1) return;
    const hello = { size: this.size, protocol: PROTOCOL_VERSION };
    await this.#rounds.exchange("hello", hello, (hellos) => {
      const wrong = hellos.flatMap((h) => h.size === this.size ? [] : [h.rank]);
      if (wrong.length > 0) {
        const list = wrong.map((r) => `rank ${r} was started with size ${hellos[r].size}`).join(
          ", ",
        );
        throw new DpError(
          "config",
          `ranks disagree on the group size (rank 0: ${this.size}): ${list}`,
          wrong,
        );
      }
      requireEqual(hellos.map((h) => h.protocol), "protocol versions", "config");
      return () => ({ size: this.size });
    }, this.#connectTimeoutMs);
  }

  /**
   * Capacity negotiation: every rank gets the minimum envelope over the ranks, and
   * kvwarm eligibility only if every rank is eligible (an eligible rank whose peer is
   * not gets the skip reason `peer_ineligible`).
   */
  async negotiateCapacity(envelope: CapacityEnvelope): Promise<NegotiatedCapacity> {
    const reply = await this.#rounds.exchange("capacity", { envelope }, (requests) => {
      const envelopes = requests.map((r) => r.envelope);
      return (rank) => ({ capacity: negotiateCapacity(envelopes, rank) });
    });
    return reply.capacity;
  }

  /** Grid digest agreement: every rank planned the same grid, or every rank fails with all digests listed. */
  async agreeGridDigest(digest: string): Promise<string> {
    const reply = await this.#rounds.exchange("grid_digest", { digest }, (requests) => {
      const agreed = requireEqual(requests.map((r) => r.digest), "grid digests", "disagreement");
      return () => ({ digest: agreed });
    });
    return reply.digest;
  }

  /** READY -> PREPARE: returns once every rank is ready for the same point. */
  async ready(benchmarkId: number, pointKey: string): Promise<void> {
    await this.#rounds.exchange(
      "ready",
      { benchmark_id: benchmarkId, point_key: pointKey },
      (requests) => {
        requireEqual(requests.map((r) => [r.benchmark_id, r.point_key]), "points", "lockstep");
        return () => ({ benchmark_id: benchmarkId });
      },
    );
  }

  /**
   * ARM -> GO: returns once every rank has armed the point with an equal scheduled-shape
   * summary; the measured step starts after this returns.
   */
  async arm(benchmarkId: number, shape: ScheduledShape): Promise<void> {
    await this.#rounds.exchange("arm", { benchmark_id: benchmarkId, shape }, (requests) => {
      requireEqual(requests.map((r) => r.benchmark_id), "armed points", "lockstep");
      requireEqualShapes(requests.map((r) => r.shape), benchmarkId);
      return () => ({ benchmark_id: benchmarkId });
    });
  }

  /**
   * Result gather: every rank gets the iteration walls (per sample, max over ranks);
   * rank 0 also gets every rank's wall times and data.
   */
  async gatherResult(
    benchmarkId: number,
    wallTimes: readonly number[],
    data: unknown = null,
  ): Promise<GatheredResult> {
    let ranks: RankResult[] | null = null;
    const reply = await this.#rounds.exchange(
      "result",
      { benchmark_id: benchmarkId, wall_times: [...wallTimes], data },
      (requests) => {
        requireEqual(requests.map((r) => r.benchmark_id), "result points", "lockstep");
        const walls = iterationWalls(requests.map((r) => r.wall_times), benchmarkId);
        ranks = requests.map((r) => ({ rank: r.rank, wall_times: r.wall_times, data: r.data }));
        return () => ({ benchmark_id: benchmarkId, iteration_walls: walls });
      },
    );
    return { benchmark_id: benchmarkId, iteration_walls: reply.iteration_walls, ranks };
  }

  /** The boundary vote: true (stop, soft timeout) if any rank's soft timeout has passed. */
  async boundaryVote(benchmarkId: number, softTimeout: boolean): Promise<boolean> {
    const reply = await this.#rounds.exchange(
      "boundary",
      { benchmark_id: benchmarkId, soft_timeout: softTimeout },
      (requests) => {
        requireEqual(requests.map((r) => r.benchmark_id), "boundaries", "lockstep");
        const stop = requests.some((r) => r.soft_timeout);
        return () => ({ benchmark_id: benchmarkId, stop });
      },
    );
    return reply.stop;
  }

  /** Cleanup: returns once every rank has released the point's requests and blocks. */
  async cleanup(benchmarkId: number): Promise<void> {
    await this.#rounds.exchange("cleanup", { benchmark_id: benchmarkId }, (requests) => {
      requireEqual(requests.map((r) => r.benchmark_id), "cleaned points", "lockstep");
      return () => ({ benchmark_id: benchmarkId });
    });
  }

  /**
   * The per-step group barrier (the stand-in for the MoE collective): every engine step,
   * idle steps included, ends here, so ranks step in lockstep. `seq` is the step number
   * and must be equal on every rank. Its cost is in {@link barrierCost}.
   */
  async barrier(seq: number): Promise<void> {
    await this.#rounds.exchange("barrier", { seq }, (requests) => {
      requireEqual(requests.map((r) => r.seq), "barrier steps", "lockstep");
      return () => ({ seq });
    });
  }

  /**
   * The stage round (document 004), run on every idle decode-sweep step: every rank
   * reports `(seq, batch, phase, ok)` and leaves with the same `{seq, allDone, ok}`,
   * where ok = allDone ? every rank's ok : null. A seq or batch mismatch fails every
   * rank with "ranks are not in lockstep". When the stage settles (allDone) one line
   * `stage batch=B settled by the group (ok=...) at round R` goes to the logger.
   *
   * @example
   * ```ts
   * const v = await sync.stageRound(seq, 8, buildFinished ? "done" : "building", buildFinished ? built : null);
   * if (v.allDone && !v.ok) shedChains(); // every rank sheds in the same step
   * ```
   */
  async stageRound(
    seq: number,
    batch: number | null,
    phase: StagePhase,
    ok: boolean | null,
  ): Promise<StageVerdict> {
    const reply = await this.#rounds.exchange("stage", { seq, batch, phase, ok }, (requests) => {
      const verdict = settleStageRound(requests);
      return () => ({ seq: verdict.seq, all_done: verdict.allDone, ok: verdict.ok });
    });
    const verdict: StageVerdict = { seq: reply.seq, allDone: reply.all_done, ok: reply.ok };
    if (verdict.allDone) this.#log(stageSettledLine(batch, verdict.ok, seq));
    return verdict;
  }

  /** The cost of the per-step barrier so far (microseconds per round). */
  barrierCost(): RoundCost {
    return this.#rounds.cost("barrier");
  }

  /** The cost of every kind of round so far, by request type. */
  roundCosts(): Partial<Record<RequestType, RoundCost>> {
    return this.#rounds.costs();
  }

  /**
   * Orderly end: a last round so that no rank closes while another still waits for it,
   * then the sockets close.
   */
  async finish(): Promise<void> {
    await this.#rounds.exchange("bye", {}, () => () => ({}));
    this.close();
  }

  /**
   * This rank failed (`reason`): tell the group (a follower tells rank 0, which forwards
   * it to every rank; rank 0 tells every follower), then close. A no-op on a group that
   * has already failed or closed.
   */
  async abort(reason: unknown): Promise<void> {
    if (this.#rounds.ended) {
      this.close();
      return;
    }
    const message = reason instanceof Error ? reason.message : String(reason);
    const err = reason instanceof DpError
      ? reason
      : new DpError("peer_failure", `rank ${this.rank} failed: ${message}`, [this.rank]);
    await this.#rounds.fail(err);
  }

  /** Closes the sockets now (idempotent); a pending round on this rank then fails. */
  close(): void {
    this.#rounds.close();
  }
}

function defaultBindHost(host: string): string {
  if (host === "localhost") return "127.0.0.1";
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(host) || host.includes(":")) return host;
  return "*";
}

function checkIdentity(identity: RankIdentity): void {
  const { rank, size, masterPort } = identity;
  const problem = !Number.isSafeInteger(size) || size < 1
    ? `size ${size} is not a positive integer`
    : !Number.isSafeInteger(rank) || rank < 0 || rank >= size
    ? `rank ${rank} is not in 0..${size - 1}`
    : !Number.isSafeInteger(masterPort) || masterPort < 0 || masterPort > 65535
    ? `master port ${masterPort} is not a TCP port`
    : masterPort === 0 && rank > 0
    ? "a follower cannot connect to port 0"
    : null;
  if (problem !== null) throw new DpError("config", `bad rank identity: ${problem}`);
}
