import { test } from "uvu";
import * as assert from "uvu/assert";
import { DpError } from "../../src/dp/dp_error.ts";
import { messageProblem, parseMessage, REPLY_OF } from "../../src/dp/messages.ts";

test("every request type has a reply type", () => {
  assert.is(REPLY_OF.stage, "stage_decided");
  assert.is(REPLY_OF.arm, "go");
  assert.is(REPLY_OF.ready, "prepare");
  assert.is(REPLY_OF.barrier, "barrier_done");
});

test("well-formed messages pass", () => {
  assert.is(messageProblem({ type: "barrier", rank: 1, round: 4, seq: 9 }), null);
  assert.is(
    messageProblem({ type: "stage", rank: 2, round: 4, seq: 9, batch: 8, phase: "done", ok: true }),
    null,
  );
  assert.is(
    messageProblem({ type: "arm", rank: 1, round: 2, benchmark_id: 3, shape: { num_requests: 8 } }),
    null,
  );
  assert.is(
    messageProblem({
      type: "abort",
      rank: 0,
      round: 2,
      from_rank: 2,
      code: "timeout",
      message: "m",
      ranks: [2],
    }),
    null,
  );
});

test("wrong shapes are named: unknown type, bad header, missing or extra fields", () => {
  const cases: [unknown, RegExp][] = [
    [[1, 2], /not a JSON object/],
    [{ rank: 1, round: 1 }, /no string field 'type'/],
    [{ type: "gossip", rank: 1, round: 1 }, /unknown message type 'gossip'/],
    [{ type: "barrier", rank: -1, round: 1, seq: 1 }, /barrier message field 'rank'/],
    [{ type: "barrier", rank: 1, round: "x", seq: 1 }, /barrier message field 'round'/],
    [{ type: "barrier", rank: 1, round: 1 }, /barrier message lacks the field 'seq'/],
    [{ type: "barrier", rank: 1, round: 1, seq: 1, extra: 0 }, /unexpected field 'extra'/],
    [
      { type: "arm", rank: 1, round: 1, benchmark_id: 1, shape: { n: -2 } },
      /shape.*\.n must be an integer/,
    ],
    [
      { type: "result", rank: 1, round: 1, benchmark_id: 1, wall_times: [], data: null },
      /wall_times/,
    ],
    [{ type: "error", rank: 1, round: 1, code: "oops", message: "m", ranks: [] }, /field 'code'/],
    [{ type: "toString", rank: 1, round: 1 }, /unknown message type 'toString'/],
  ];
  for (const [message, why] of cases) assert.match(messageProblem(message) ?? "", why);
});

test("a frame that is not JSON is a protocol error naming the sender", () => {
  try {
    parseMessage("{nope", "rank 2");
    assert.unreachable("parsed");
  } catch (err) {
    assert.instance(err, DpError);
    assert.is((err as DpError).code, "protocol");
    assert.match((err as Error).message, /malformed message from rank 2: not JSON/);
  }
});

test.run();
