import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  type CapacityEnvelope,
  checkCapacityEnvelope,
  negotiateCapacity,
  PEER_INELIGIBLE,
} from "../../src/dp/capacity.ts";

const eligible: CapacityEnvelope = {
  usable_blocks: 900,
  max_model_len: 4096,
  max_num_seqs: 64,
  max_batched_tokens: 8192,
  kvwarm_eligible: true,
  kvwarm_skip_reason: null,
};

test("every rank plans with the minimum envelope over the ranks", () => {
  const envelopes = [
    eligible,
    { ...eligible, usable_blocks: 700, max_num_seqs: 128 },
    { ...eligible, max_model_len: 2048, max_batched_tokens: 4096 },
  ];
  for (const rank of [0, 1, 2]) {
    const c = negotiateCapacity(envelopes, rank);
    assert.equal(
      [c.usable_blocks, c.max_model_len, c.max_num_seqs, c.max_batched_tokens],
      [700, 2048, 64, 4096],
    );
    assert.is(c.kvwarm_eligible, true);
    assert.is(c.kvwarm_skip_reason, null);
    assert.is(c.first_ineligible, null);
  }
});

test("one ineligible rank makes kvwarm ineligible everywhere; the others say peer_ineligible", () => {
  const envelopes = [
    eligible,
    { ...eligible, kvwarm_eligible: false, kvwarm_skip_reason: "dataset_unavailable:missing" },
    { ...eligible, kvwarm_eligible: false, kvwarm_skip_reason: "content_too_shallow" },
  ];
  const seen = [0, 1, 2].map((rank) => negotiateCapacity(envelopes, rank));
  assert.equal(seen.map((c) => c.kvwarm_eligible), [false, false, false]);
  assert.equal(seen.map((c) => c.kvwarm_skip_reason), [
    PEER_INELIGIBLE,
    "dataset_unavailable:missing",
    "content_too_shallow",
  ]);
  for (const c of seen) {
    assert.equal(c.first_ineligible, { rank: 1, reason: "dataset_unavailable:missing" });
  }
});

test("an envelope gives a skip reason exactly when it is not eligible", () => {
  assert.is(checkCapacityEnvelope(eligible), null);
  assert.match(
    checkCapacityEnvelope({ ...eligible, kvwarm_skip_reason: "flag_off" }) ?? "",
    /eligible but gives a kvwarm_skip_reason/,
  );
  assert.match(
    checkCapacityEnvelope({ ...eligible, kvwarm_eligible: false }) ?? "",
    /not kvwarm_eligible but gives no kvwarm_skip_reason/,
  );
  assert.match(checkCapacityEnvelope({ ...eligible, usable_blocks: -1 }) ?? "", /usable_blocks/);
  assert.match(checkCapacityEnvelope({ ...eligible, extra: 1 }) ?? "", /unexpected field 'extra'/);
});

test.run();
