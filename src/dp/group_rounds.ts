/**
 * The group's rounds: the one exchange every synchronizer phase is made of. Each follower
 * sends rank 0 a request; rank 0 waits for all of them, checks every one (shape, sender,
 * round, type), combines them with its own through the phase's decision and answers
 * every rank in the same round. A failure anywhere is forwarded so that no rank hangs:
 * rank 0 sends every follower an `abort`, a follower sends rank 0 an `error` (which rank
 * 0 forwards); then the rounds are failed and the socket closed.
 */
import { DpError } from "./dp_error.ts";
import {
  type AnyMessage,
  encodeMessage,
  type Message,
  messageProblem,
  parseMessage,
  REPLY_OF,
  type ReplyPayloads,
  type ReplyTypeOf,
  type RequestPayloads,
  type RequestType,
} from "./messages.ts";
import { type RoundCost, RoundCostMeter } from "./round_cost.ts";
import { CoordinatorLink, FollowerLink, LinkClosedError } from "./zmq_link.ts";

/** At most this much longer than rank 0 (and a quarter of the timeout) a follower waits, ms. */
export const FOLLOWER_GRACE_MS = 2000;

/**
 * How long rank 0 looks for the last notice of a rank it can no longer answer, ms: a rank that
 * is interrupted sends its notice and leaves, and rank 0 may find it gone while answering a
 * round before it has read the notice (then the group ends interrupted, not failed).
 */
export const DEPARTED_NOTICE_MS = 250;

/**
 * How rank 0 answers a round: from every rank's request (index = rank) to each rank's
 * reply payload. It throws a {@link DpError} when the ranks disagree.
 */
export type Decision<T extends RequestType> = (
  requests: readonly Message<T>[],
) => (rank: number) => ReplyPayloads[ReplyTypeOf<T>];

type State = "created" | "open" | "failed" | "closed";

/**
 * One rank's side of the group's rounds over its link (none for a group of one, where
 * every round is decided locally).
 */
export class GroupRounds {
  /** This rank. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  readonly #link: CoordinatorLink | FollowerLink | null;
  readonly #timeoutMs: number;
  readonly #costs = new Map<RequestType, RoundCostMeter>();
  readonly #knownToGroup = new WeakSet<DpError>();
  #state: State = "created";
  #failure: DpError | null = null;
  #round = 0;
  #busy: RequestType | null = null;

  /** Rounds of `rank` in a group of `size` over `link`, each wait limited to `timeoutMs`. */
  constructor(
    rank: number,
    size: number,
    link: CoordinatorLink | FollowerLink | null,
    timeoutMs: number,
  ) {
    this.rank = rank;
    this.size = size;
    this.#link = link;
    this.#timeoutMs = timeoutMs;
  }

  /** The link's endpoint, or null for a group of one. */
  get endpoint(): string | null {
    return this.#link?.endpoint ?? null;
  }

  /** The error that failed the group, or null. */
  get failure(): DpError | null {
    return this.#failure;
  }

  /** Whether the rounds have failed or were closed. */
  get ended(): boolean {
    return this.#state === "failed" || this.#state === "closed";
  }

  /** Allows rounds (once, before the hello round). */
  open(): void {
    if (this.#state !== "created") {
      throw new Error(`connect() on a synchronizer that is ${this.#state}`);
    }
    this.#state = "open";
  }

  /** The cost of the rounds of `type` so far. */
  cost(type: RequestType): RoundCost {
    return this.#meter(type).summary();
  }

  /** The cost of every kind of round so far, by request type. */
  costs(): Partial<Record<RequestType, RoundCost>> {
    return Object.fromEntries([...this.#costs].map(([type, meter]) => [type, meter.summary()]));
  }

  /**
   * One round: sends this rank's request, and returns this rank's reply once rank 0 has
   * decided. Any failure fails the rounds (forwarded to the group) and is thrown.
   */
  async exchange<T extends RequestType>(
    type: T,
    payload: RequestPayloads[T],
    decide: Decision<T>,
    timeoutMs = this.#timeoutMs,
  ): Promise<ReplyPayloads[ReplyTypeOf<T>]> {
    this.#checkUsable(type);
    const round = type === "hello" ? 0 : ++this.#round;
    this.#busy = type;
    const startedAt = performance.now();
    try {
      const own = this.#ownRequest(type, round, payload);
      let reply: ReplyPayloads[ReplyTypeOf<T>];
      if (this.size === 1) reply = decide([own])(0);
      else if (this.rank === 0) reply = await this.#coordinate(type, round, own, decide, timeoutMs);
      else reply = await this.#follow(type, round, own, timeoutMs);
      this.#meter(type).add((performance.now() - startedAt) * 1000);
      return reply;
    } catch (err) {
      throw await this.fail(err);
    } finally {
      this.#busy = null;
    }
  }

  /** Closes the socket now (idempotent); a pending round then fails. */
  close(): void {
    if (this.#state !== "failed") this.#state = "closed";
    this.#link?.close();
  }

  #meter(type: RequestType): RoundCostMeter {
    let meter = this.#costs.get(type);
    if (meter === undefined) this.#costs.set(type, meter = new RoundCostMeter());
    return meter;
  }

  #checkUsable(type: RequestType): void {
    if (this.#state === "failed") {
      const f = this.#failure!;
      throw new DpError(
        "closed",
        `the group already failed (${f.message}); ${type} refused`,
        f.ranks,
      );
    }
    if (this.#state === "closed") {
      throw new DpError("closed", `the synchronizer is closed; ${type} refused`);
    }
    if (this.#state === "created") {
      throw new Error(`${type} before connect(): call connect() or use RankSynchronizer.open`);
    }
    if (this.#busy !== null) {
      throw new Error(`${type} while ${this.#busy} is still waiting: one round at a time`);
    }
  }

  /** This rank's own request, checked like any other (a bad local status fails the group too). */
  #ownRequest<T extends RequestType>(
    type: T,
    round: number,
    payload: RequestPayloads[T],
  ): Message<T> {
    const message = { type, rank: this.rank, round, ...payload };
    let wire: unknown;
    try {
      wire = JSON.parse(JSON.stringify(message));
    } catch (err) {
      throw new DpError(
        "protocol",
        `rank ${this.rank}'s own ${type} cannot be sent as JSON: ${(err as Error).message}`,
        [this.rank],
      );
    }
    const problem = messageProblem(wire);
    if (problem !== null) {
      throw new DpError("protocol", `rank ${this.rank}'s own ${problem}`, [this.rank]);
    }
    return wire as Message<T>;
  }

  async #coordinate<T extends RequestType>(
    type: T,
    round: number,
    own: Message<T>,
    decide: Decision<T>,
    timeoutMs: number,
  ): Promise<ReplyPayloads[ReplyTypeOf<T>]> {
    const link = this.#link as CoordinatorLink;
    const deadline = performance.now() + timeoutMs;
    const requests: Message<T>[] = [own];
    const pending = new Set<number>();
    for (let r = 1; r < this.size; r++) pending.add(r);
    while (pending.size > 0) {
      const incoming = await link.receive(deadline);
      if (incoming === null) throw this.#timeout(type, own, [...pending], timeoutMs);
      const sender = this.#senderRank(incoming.from);
      if (incoming.frames.length !== 1) {
        throw new DpError(
          "protocol",
          `malformed message from rank ${sender}: ${incoming.frames.length} frames, want 1`,
          [sender],
        );
      }
      const message = withRanks(() => parseMessage(incoming.frames[0], `rank ${sender}`), [sender]);
      if (message.rank !== sender) {
        throw new DpError(
          "protocol",
          `malformed message from rank ${sender}: it claims to be rank ${message.rank}`,
          [sender],
        );
      }
      if (message.type === "error") {
        // A follower that gave up on its hello first (it started waiting before rank 0 did)
        // blames rank 0; rank 0 knows which ranks never connected, and names them.
        const silent = [...pending].filter((r) => r !== sender);
        if (type === "hello" && silent.length > 0) {
          const who = `rank${silent.length > 1 ? "s" : ""} ${silent.join(", ")}`;
          throw new DpError(
            "timeout",
            `${who} never connected to rank 0 at ${this.endpoint}; rank ${sender} stopped ` +
              `waiting first (${message.message})`,
            silent,
          );
        }
        throw peerError(message.message, sender);
      }
      if (message.type !== type || message.round !== round) {
        throw new DpError(
          "lockstep",
          `ranks are not in lockstep: rank ${sender} sent ${
            describe(message)
          } (round ${message.round}) ` +
            `while rank 0 waits for ${describe(own)} (round ${round})`,
          [sender],
        );
      }
      if (!pending.has(sender)) {
        throw new DpError("protocol", `rank ${sender} sent ${type} twice in round ${round}`, [
          sender,
        ]);
      }
      pending.delete(sender);
      requests[sender] = message as Message<T>;
    }
    const replyFor = decide(requests);
    const replyType = REPLY_OF[type];
    for (let r = 1; r < this.size; r++) {
      const reply = { type: replyType, rank: 0, round, ...replyFor(r) } as AnyMessage;
      if (!await link.send(String(r), encodeMessage(reply), performance.now() + timeoutMs)) {
        throw await this.#departed(
          link,
          r,
          `the ${replyType} of round ${round} could not be delivered`,
        );
      }
    }
    return replyFor(0);
  }

  async #follow<T extends RequestType>(
    type: T,
    round: number,
    own: Message<T>,
    timeoutMs: number,
  ): Promise<ReplyPayloads[ReplyTypeOf<T>]> {
    const link = this.#link as FollowerLink;
    // A follower outwaits rank 0 a little, so that rank 0's diagnosis (which names the
    // rank that did not answer) reaches it before its own timeout does.
    const waitMs = timeoutMs + Math.min(timeoutMs / 4, FOLLOWER_GRACE_MS);
    const deadline = performance.now() + waitMs;
    if (!await link.send(encodeMessage(own as AnyMessage), deadline)) {
      throw new DpError(
        "timeout",
        `rank ${this.rank} could not send ${describe(own)} to rank 0 at ${link.endpoint} within ${
          seconds(waitMs)
        }`,
        [0],
      );
    }
    const frames = await link.receive(deadline);
    if (frames === null) {
      throw new DpError(
        "timeout",
        type === "hello"
          ? `rank 0 at ${link.endpoint} did not answer rank ${this.rank}'s hello within ${
            seconds(waitMs)
          } (rank 0 is not up, or still waits for a rank that has not connected)`
          : `timed out after ${
            seconds(waitMs)
          } waiting for rank 0 (${link.endpoint}) to answer rank ${this.rank}'s ${
            describe(own)
          } (round ${round})`,
        [0],
      );
    }
    if (frames.length !== 1) {
      throw new DpError(
        "protocol",
        `malformed message from rank 0: ${frames.length} frames, want 1`,
        [0],
      );
    }
    const message = withRanks(() => parseMessage(frames[0], "rank 0"), [0]);
    if (message.rank !== 0) {
      throw new DpError(
        "protocol",
        `malformed message from rank 0: it claims to be rank ${message.rank}`,
        [0],
      );
    }
    if (message.type === "abort") {
      const err = new DpError(
        message.code,
        `rank 0 stopped the group: ${message.message}`,
        message.ranks,
      );
      this.#knownToGroup.add(err);
      throw err;
    }
    const replyType = REPLY_OF[type];
    const echoes = (["seq", "benchmark_id", "size"] as const).filter((k) =>
      k in message && k in own &&
      (message as Record<string, unknown>)[k] !== (own as Record<string, unknown>)[k]
    );
    if (message.type !== replyType || message.round !== round || echoes.length > 0) {
      throw new DpError(
        "lockstep",
        `ranks are not in lockstep: rank 0 answered ${
          describe(message)
        } (round ${message.round}) ` +
          `to rank ${this.rank}'s ${describe(own)} (round ${round})`,
        [0],
      );
    }
    const { type: _t, rank: _r, round: _n, ...payload } = message as Record<string, unknown>;
    return payload as ReplyPayloads[ReplyTypeOf<T>];
  }

  /**
   * Why rank 0 cannot reach rank `r` (`what` could not be delivered): the error `r` sent before
   * it left where it reaches rank 0 within DEPARTED_NOTICE_MS (its interrupt notice, say),
   * else that `r` is no longer connected. Other messages read meanwhile are dropped: the
   * group is failing.
   */
  async #departed(link: CoordinatorLink, r: number, what: string): Promise<DpError> {
    const deadline = performance.now() + DEPARTED_NOTICE_MS;
    for (let got = await link.receive(deadline); got !== null; got = await link.receive(deadline)) {
      if (got.from !== String(r) || got.frames.length !== 1) continue;
      let message: AnyMessage;
      try {
        message = parseMessage(got.frames[0], `rank ${r}`);
      } catch {
        continue;
      }
      if (message.type === "error" && message.rank === r) return peerError(message.message, r);
    }
    return new DpError("peer_failure", `rank ${r} is no longer connected: ${what}`, [r]);
  }

  #senderRank(from: string): number {
    const rank = /^[1-9]\d*$/.test(from) ? Number(from) : NaN;
    if (!(rank >= 1 && rank < this.size)) {
      throw new DpError(
        "protocol",
        `a peer with routing id ${
          JSON.stringify(from)
        } is not a follower rank of this group of ${this.size}`,
      );
    }
    return rank;
  }

  #timeout(
    type: RequestType,
    own: { readonly type: string; readonly round: number },
    missing: number[],
    timeoutMs: number,
  ): DpError {
    const who = `rank${missing.length > 1 ? "s" : ""} ${missing.join(", ")}`;
    return new DpError(
      "timeout",
      type === "hello"
        ? `${who} never connected to rank 0 at ${this.endpoint} (no hello within ${
          seconds(timeoutMs)
        })`
        : `timed out after ${seconds(timeoutMs)} waiting for ${who} in ${
          describe(own)
        } (round ${own.round})`,
      missing,
    );
  }

  /**
   * Leaves the rounds failed and closed, after telling the others: rank 0 sends every
   * follower an abort; a follower sends rank 0 an error (which rank 0 forwards). An
   * error that came from the group is not echoed back. Returns the failure (the first
   * one, when called again).
   */
  async fail(cause: unknown): Promise<DpError> {
    if (this.#failure !== null) return this.#failure;
    const err = toDpError(cause, this.#state === "closed");
    this.#failure = err;
    const wasClosed = this.#state === "closed";
    this.#state = "failed";
    const link = this.#link;
    if (link !== null && !link.closed && !wasClosed && !this.#knownToGroup.has(err)) {
      const deadline = performance.now() + 200;
      try {
        if (link instanceof CoordinatorLink) {
          const from = err.code === "peer_failure" && err.ranks.length > 0 ? err.ranks[0] : 0;
          for (let r = 1; r < this.size; r++) {
            const abort: AnyMessage = {
              type: "abort",
              rank: 0,
              round: this.#round,
              from_rank: from,
              code: err.code,
              message: clip(err.message),
              ranks: [...err.ranks],
            };
            await link.send(String(r), encodeMessage(abort), deadline);
          }
        } else {
          const notice: AnyMessage = {
            type: "error",
            rank: this.rank,
            round: this.#round,
            code: err.code,
            message: clip(err.message),
            ranks: [...err.ranks],
          };
          await link.send(encodeMessage(notice), deadline);
        }
      } catch {
        // The group is told on a best-effort basis; the peers' own timeouts cover the rest.
      }
    }
    link?.close();
    return err;
  }
}
/** A follower's error notice as rank 0 reports it: `rank <sender> failed: ...`. */
function peerError(text: string, sender: number): DpError {
  const prefix = `rank ${sender} failed: `;
  return new DpError("peer_failure", text.startsWith(prefix) ? text : prefix + text, [sender]);
}

function toDpError(cause: unknown, closedLocally: boolean): DpError {
  if (cause instanceof DpError) return cause;
  if (cause instanceof LinkClosedError || closedLocally) {
    return new DpError("closed", "the synchronizer was closed while a round was waiting");
  }
  const message = cause instanceof Error ? cause.message : String(cause);
  return new DpError("protocol", `ZeroMQ failure: ${message}`);
}

function withRanks<T>(fn: () => T, ranks: number[]): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof DpError) throw new DpError(err.code, err.message, ranks);
    throw err;
  }
}

/** A message in words for errors: its type and the fields that place it. */
function describe(m: { readonly type: string }): string {
  const r = m as unknown as Record<string, unknown>;
  const parts = ["seq", "batch", "phase", "benchmark_id"].filter((k) => k in r).map((k) =>
    `${k}=${r[k]}`
  );
  return parts.length > 0 ? `${m.type} ${parts.join(" ")}` : m.type;
}

function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`;
}

function clip(text: string): string {
  return text.length > 8000 ? text.slice(0, 8000) + "..." : text;
}
