/**
 * The ZeroMQ sockets under the synchronizer: rank 0's ROUTER and each follower's DEALER
 * (routing id `String(rank)`), with deadline-bounded send and receive.
 *
 * Waiting is done here, in JavaScript, not by zeromq.js's own poller: every socket
 * operation runs with a zero timeout (the addon's synchronous fast path), and a wait
 * re-tries on the next macrotask for the first `spinMs` milliseconds (default
 * {@link DEFAULT_SPIN_MS}), then every millisecond. Reason: under Deno 2.9 the addon's libuv integration is incomplete (its
 * `uv_poll` shim stops after the first callback, so a pending `receive()` never
 * resolves, and a positive `receiveTimeout` crashes the process), while the zero-timeout
 * path works the same in Deno and Node. Nothing is left pending on a socket between
 * calls, so closing a link leaves no handle that keeps the process alive. The spin
 * window matters: a timer wakes a wait only every 1-2 ms, so rounds whose ranks arrive
 * further apart than the window pay that much latency on each side.
 */
import { setImmediate } from "node:timers";
import { Dealer, Router } from "zeromq";

/** How long a wait re-tries on every macrotask before it falls back to 1 ms sleeps, ms. */
export const DEFAULT_SPIN_MS = 10;

/** Options shared by both ends. */
export interface LinkOptions {
  /** How long unsent messages may delay closing, ms (so a last abort still leaves). */
  readonly lingerMs: number;
  /**
   * How long a wait re-tries on every macrotask (low latency, one busy core) before it
   * sleeps 1 ms between tries. Default {@link DEFAULT_SPIN_MS}.
   */
  readonly spinMs?: number;
}

/** One message that arrived at rank 0: the sender's routing id and its frames after it. */
export interface RoutedFrames {
  /** The sender's routing id (a follower's rank as a string). */
  readonly from: string;
  /** The frames after the routing id (the protocol uses exactly one). */
  readonly frames: readonly string[];
}

type ZmqSocket = Router | Dealer;

function zmqCode(err: unknown): string | undefined {
  return (err as { code?: string } | null)?.code;
}

const nextMacrotask = () => new Promise<void>((resolve) => setImmediate(resolve));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitStep(startedAt: number, deadline: number, spinMs: number): Promise<boolean> {
  const now = performance.now();
  if (now >= deadline) return false;
  if (now - startedAt < spinMs) await nextMacrotask();
  else await sleep(Math.max(0, Math.min(1, deadline - now)));
  return true;
}

/** Receives one multipart message before `deadline` (a performance.now() time), or null. */
async function receiveBefore(
  socket: ZmqSocket,
  deadline: number,
  spinMs: number,
  isClosed: () => boolean,
): Promise<string[] | null> {
  const startedAt = performance.now();
  for (;;) {
    if (isClosed()) throw new LinkClosedError();
    try {
      const frames = await socket.receive();
      return frames.map((f) => f.toString("utf8"));
    } catch (err) {
      if (zmqCode(err) !== "EAGAIN") {
        if (isClosed()) throw new LinkClosedError();
        throw err;
      }
    }
    if (!await waitStep(startedAt, deadline, spinMs)) return null;
  }
}

/** Thrown when a link is used after {@link CoordinatorLink.close} / {@link FollowerLink.close}. */
export class LinkClosedError extends Error {
  constructor() {
    super("the ZeroMQ link is closed");
    this.name = "LinkClosedError";
  }
}

/** The `tcp://` endpoint for a host and port (IPv6 hosts in brackets). */
export function tcpEndpoint(host: string, port: number): string {
  return host.includes(":") ? `tcp://[${host}]:${port}` : `tcp://${host}:${port}`;
}

/**
 * Rank 0's end: a ROUTER bound to an endpoint. Sending to a rank that is not
 * connected fails (`mandatory`), so a vanished rank is noticed instead of dropped.
 */
export class CoordinatorLink {
  readonly #socket: Router;
  readonly #spinMs: number;
  #closed = false;
  /** The endpoint actually bound (with the real port when port 0 was asked for). */
  readonly endpoint: string;

  private constructor(socket: Router, endpoint: string, spinMs: number) {
    this.#socket = socket;
    this.#spinMs = spinMs;
    this.endpoint = endpoint;
  }

  /**
   * Binds a ROUTER to `endpoint` (e.g. `tcp://127.0.0.1:0` for any free port).
   *
   * @example
   * ```ts
   * const link = await CoordinatorLink.bind("tcp://127.0.0.1:0", { lingerMs: 1000 });
   * link.endpoint; // "tcp://127.0.0.1:40123"
   * link.close();
   * ```
   */
  static async bind(endpoint: string, options: LinkOptions): Promise<CoordinatorLink> {
    const socket = new Router({
      mandatory: true,
      receiveTimeout: 0,
      sendTimeout: 0,
      linger: options.lingerMs,
      ipv6: endpoint.includes("["),
    });
    try {
      await socket.bind(endpoint);
    } catch (err) {
      socket.close();
      throw err;
    }
    return new CoordinatorLink(
      socket,
      socket.lastEndpoint ?? endpoint,
      options.spinMs ?? DEFAULT_SPIN_MS,
    );
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** The next message from any follower before `deadline` (performance.now() ms), or null. */
  async receive(deadline: number): Promise<RoutedFrames | null> {
    const frames = await receiveBefore(this.#socket, deadline, this.#spinMs, () => this.#closed);
    if (frames === null) return null;
    return { from: frames[0], frames: frames.slice(1) };
  }

  /**
   * Sends one frame to the follower with routing id `to`; false when that follower is
   * not connected (gone, or never came), or its queue stayed full until `deadline`.
   */
  async send(to: string, body: string, deadline: number): Promise<boolean> {
    const startedAt = performance.now();
    for (;;) {
      if (this.#closed) throw new LinkClosedError();
      try {
        await this.#socket.send([to, body]);
        return true;
      } catch (err) {
        const code = zmqCode(err);
        if (code === "EHOSTUNREACH") return false;
        if (code !== "EAGAIN") throw err;
      }
      if (!await waitStep(startedAt, deadline, this.#spinMs)) return false;
    }
  }

  /** Closes the socket (idempotent); queued messages may linger for `lingerMs`. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#socket.close();
  }
}

/** A follower's end: a DEALER with routing id `String(rank)`, connected to rank 0. */
export class FollowerLink {
  readonly #socket: Dealer;
  readonly #spinMs: number;
  #closed = false;
  /** The endpoint this link connects to. */
  readonly endpoint: string;

  private constructor(socket: Dealer, endpoint: string, spinMs: number) {
    this.#socket = socket;
    this.#spinMs = spinMs;
    this.endpoint = endpoint;
  }

  /**
   * Connects a DEALER to rank 0's endpoint. ZeroMQ reconnects in the background, so
   * rank 0 may start later; messages wait in the queue until it does.
   */
  static connect(endpoint: string, rank: number, options: LinkOptions): FollowerLink {
    const socket = new Dealer({
      routingId: String(rank),
      receiveTimeout: 0,
      sendTimeout: 0,
      linger: options.lingerMs,
      ipv6: endpoint.includes("["),
    });
    try {
      socket.connect(endpoint);
    } catch (err) {
      socket.close();
      throw err;
    }
    return new FollowerLink(socket, endpoint, options.spinMs ?? DEFAULT_SPIN_MS);
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** The next message from rank 0 before `deadline` (performance.now() ms), or null. */
  receive(deadline: number): Promise<string[] | null> {
    return receiveBefore(this.#socket, deadline, this.#spinMs, () => this.#closed);
  }

  /** Sends one frame to rank 0; false when it could not be queued before `deadline`. */
  async send(body: string, deadline: number): Promise<boolean> {
    const startedAt = performance.now();
    for (;;) {
      if (this.#closed) throw new LinkClosedError();
      try {
        await this.#socket.send(body);
        return true;
      } catch (err) {
        if (zmqCode(err) !== "EAGAIN") throw err;
      }
      if (!await waitStep(startedAt, deadline, this.#spinMs)) return false;
    }
  }

  /** Closes the socket (idempotent); queued messages may linger for `lingerMs`. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#socket.close();
  }
}
