/**
 * The synchronizer's wire protocol: JSON messages, one per ZeroMQ frame. Every message
 * carries `type`, the sender's `rank` and the exchange's `round` (counted alike on
 * every rank, so a rank in another exchange is caught). Each request a rank sends to
 * rank 0 has one reply type; `error` (a follower failed) and `abort` (rank 0 stops the
 * group) can come instead. Every message is checked against its shape on arrival.
 */
import {
  type CapacityEnvelope,
  checkCapacityEnvelope,
  checkNegotiatedCapacity,
  type NegotiatedCapacity,
} from "./capacity.ts";
import { DP_ERROR_CODES, DpError, type DpErrorCode } from "./dp_error.ts";
import {
  arrayOf,
  boolean,
  type Check,
  checkObject,
  finite,
  integer,
  json,
  oneOf,
  recordOf,
  type Shape,
  text,
} from "./shape_check.ts";
import { checkStageStatus, checkStageVerdict, type StageStatus } from "./stage_round.ts";

/** The protocol version a hello carries; ranks of different versions refuse each other. */
export const PROTOCOL_VERSION = 1;

/**
 * A scheduled-shape summary of a point's step, checked equal across ranks before GO:
 * named non-negative integer counts (e.g. `num_requests`, `scheduled_tokens`).
 */
export type ScheduledShape = Readonly<Record<string, number>>;

/** What a rank sends rank 0 in each kind of exchange. */
export interface RequestPayloads {
  /** Connect: this rank's idea of the group size, and its protocol version. */
  hello: { size: number; protocol: number };
  /** Capacity negotiation: this rank's envelope. */
  capacity: { envelope: CapacityEnvelope };
  /** Grid digest agreement: the digest of the grid this rank planned. */
  grid_digest: { digest: string };
  /** READY: this rank is ready for the point. */
  ready: { benchmark_id: number; point_key: string };
  /** ARM: the point is admitted; its scheduled-shape summary. */
  arm: { benchmark_id: number; shape: ScheduledShape };
  /** Result gather: this rank's wall times (s) and data. */
  result: { benchmark_id: number; wall_times: number[]; data: unknown };
  /** Boundary vote: whether this rank's soft timeout has passed. */
  boundary: { benchmark_id: number; soft_timeout: boolean };
  /** Cleanup: this rank released the point. */
  cleanup: { benchmark_id: number };
  /** The per-step barrier: the step number. */
  barrier: { seq: number };
  /** The stage round: this rank's stage status. */
  stage: StageStatus;
  /** The orderly end. */
  bye: Record<never, never>;
}

/** What rank 0 answers each kind of exchange with. */
export interface ReplyPayloads {
  /** Every rank is connected. */
  welcome: { size: number };
  /** The group's capacity as seen by the receiving rank. */
  capacity_agreed: { capacity: NegotiatedCapacity };
  /** The agreed grid digest. */
  grid_agreed: { digest: string };
  /** PREPARE: every rank is ready; admit the point. */
  prepare: { benchmark_id: number };
  /** GO: every rank armed an equal shape; start timing. */
  go: { benchmark_id: number };
  /** Per sample, the max wall over ranks. */
  result_gathered: { benchmark_id: number; iteration_walls: number[] };
  /** Stop (soft timeout) when any rank voted so. */
  boundary_decided: { benchmark_id: number; stop: boolean };
  /** Every rank released the point. */
  cleaned: { benchmark_id: number };
  /** Every rank reached the step's barrier. */
  barrier_done: { seq: number };
  /** The stage round's verdict. */
  stage_decided: { seq: number; all_done: boolean; ok: boolean | null };
  /** Every rank is done; close. */
  bye_ack: Record<never, never>;
}

/** Failure notices: a follower's `error` to rank 0, rank 0's `abort` to every follower. */
export interface FailurePayloads {
  /** A follower failed (sent to rank 0, which forwards it). */
  error: { code: DpErrorCode; message: string; ranks: number[] };
  /** Rank 0 stops the group; `from_rank` is the rank whose failure caused it. */
  abort: { from_rank: number; code: DpErrorCode; message: string; ranks: number[] };
}

/** Every payload by message type. */
export type Payloads = RequestPayloads & ReplyPayloads & FailurePayloads;
/** Every message type. */
export type MessageType = keyof Payloads;
/** A request type (what followers send and rank 0 gathers). */
export type RequestType = keyof RequestPayloads;
/** A reply type. */
export type ReplyType = keyof ReplyPayloads;

/** A message of type `T`. */
export type Message<T extends MessageType> = { type: T; rank: number; round: number } & Payloads[T];
/** Any message. */
export type AnyMessage = { [T in MessageType]: Message<T> }[MessageType];

/** The reply type of each request type. */
export const REPLY_OF = {
  hello: "welcome",
  capacity: "capacity_agreed",
  grid_digest: "grid_agreed",
  ready: "prepare",
  arm: "go",
  result: "result_gathered",
  boundary: "boundary_decided",
  cleanup: "cleaned",
  barrier: "barrier_done",
  stage: "stage_decided",
  bye: "bye_ack",
} as const satisfies { readonly [T in RequestType]: ReplyType };

/** The reply type of request type `T`. */
export type ReplyTypeOf<T extends RequestType> = (typeof REPLY_OF)[T];

const id = integer(1);
const code = oneOf(...DP_ERROR_CODES);
const ranks = arrayOf(integer(0), 0, 4096);

const PAYLOAD_CHECKS: { readonly [T in MessageType]: Shape | Check } = {
  hello: { size: integer(2), protocol: integer(1) },
  capacity: { envelope: checkCapacityEnvelope },
  grid_digest: { digest: text(256) },
  ready: { benchmark_id: id, point_key: text(1024) },
  arm: { benchmark_id: id, shape: recordOf(integer(0)) },
  result: { benchmark_id: id, wall_times: arrayOf(finite(0), 1, 1024), data: json },
  boundary: { benchmark_id: integer(0), soft_timeout: boolean },
  cleanup: { benchmark_id: id },
  barrier: { seq: integer(0) },
  stage: checkStageStatus,
  bye: {},
  welcome: { size: integer(2) },
  capacity_agreed: { capacity: checkNegotiatedCapacity },
  grid_agreed: { digest: text(256) },
  prepare: { benchmark_id: id },
  go: { benchmark_id: id },
  result_gathered: { benchmark_id: id, iteration_walls: arrayOf(finite(0), 1, 1024) },
  boundary_decided: { benchmark_id: integer(0), stop: boolean },
  cleaned: { benchmark_id: id },
  barrier_done: { seq: integer(0) },
  stage_decided: checkStageVerdict,
  bye_ack: {},
  error: { code, message: text(8192), ranks },
  abort: { from_rank: integer(0), code, message: text(8192), ranks },
};

/**
 * Why a message does not fit its type's shape, or null when it does.
 *
 * @example
 * ```ts
 * messageProblem({ type: "barrier", rank: 1, round: 3, seq: -1 });
 * // "barrier message field 'seq' must be an integer >= 0"
 * ```
 */
export function messageProblem(value: unknown): string | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return "message is not a JSON object";
  }
  const { type, rank, round, ...payload } = value as Record<string, unknown>;
  if (typeof type !== "string") return "message has no string field 'type'";
  if (!Object.hasOwn(PAYLOAD_CHECKS, type)) return `unknown message type '${type}'`;
  for (const [name, v] of [["rank", rank], ["round", round]] as const) {
    const problem = integer(0)(v);
    if (problem !== null) return `${type} message field '${name}' ${problem}`;
  }
  const check = PAYLOAD_CHECKS[type as MessageType];
  const problem = typeof check === "function" ? check(payload) : checkObject(payload, check);
  return problem === null ? null : `${type} message ${problem}`;
}

/**
 * Parses and checks one frame; a frame that is not JSON or does not fit its shape
 * throws a {@link DpError} with code `protocol` whose message names the sender.
 */
export function parseMessage(frame: string, sender: string): AnyMessage {
  let value: unknown;
  try {
    value = JSON.parse(frame);
  } catch {
    const shown = frame.length > 80 ? frame.slice(0, 80) + "..." : frame;
    throw new DpError(
      "protocol",
      `malformed message from ${sender}: not JSON: ${JSON.stringify(shown)}`,
    );
  }
  const problem = messageProblem(value);
  if (problem !== null) {
    throw new DpError("protocol", `malformed message from ${sender}: ${problem}`);
  }
  return value as AnyMessage;
}

/** Encodes a message for the wire. */
export function encodeMessage(message: AnyMessage): string {
  return JSON.stringify(message);
}
