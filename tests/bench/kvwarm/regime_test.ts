/**
 * The kv_seed_regime vocabulary: decode `real_kv | fake_fallback | legacy | skip:<reason>`,
 * prefill `real_prefix | fake_prefix | not_applicable`; every seeder speaks only it, and
 * the artifact checker refuses anything else (or a regime of the other kind).
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import {
  DECODE_KV_SEED_REGIMES,
  isDecodeRegime,
  isKvSeedRegime,
  isPrefillRegime,
  PREFILL_KV_SEED_REGIMES,
} from "../../../src/bench/kvwarm/regime.ts";
import { FakeKvSeeder } from "../../../src/bench/decode_seeder.ts";
import { FakePrefixSeeder } from "../../../src/bench/prefix_seeder.ts";
import { RealPrefixSeeder } from "../../../src/bench/kvwarm/real_prefix_seeder.ts";
import { decodePoint, prefillPoint } from "../../../src/bench/point.ts";

test("the vocabulary, exactly", () => {
  assert.equal([...DECODE_KV_SEED_REGIMES], ["real_kv", "fake_fallback", "legacy"]);
  assert.equal([...PREFILL_KV_SEED_REGIMES], ["real_prefix", "fake_prefix", "not_applicable"]);
  for (const r of ["real_kv", "fake_fallback", "legacy", "skip:no_room"]) {
    assert.ok(isDecodeRegime(r) && !isPrefillRegime(r), r);
  }
  for (const r of ["real_prefix", "fake_prefix", "not_applicable"]) {
    assert.ok(isPrefillRegime(r) && !isDecodeRegime(r), r);
  }
  for (const r of ["real", "fake", "skip:", "SKIP:x", "", null, 3, "real_kv "]) {
    assert.not.ok(isKvSeedRegime(r), JSON.stringify(r));
  }
});

test("the fake and real-prefix seeders speak it", () => {
  const fake = new FakeKvSeeder({ requested: "off", skipReason: "flag_off" });
  assert.is(fake.regime(decodePoint(2, 8)), "legacy");
  assert.is(new FakePrefixSeeder().regime(prefillPoint(2, 8, 16)), "fake_prefix");
  assert.is(new FakePrefixSeeder().regime(prefillPoint(2, 8, 0)), "not_applicable");
  assert.is(new RealPrefixSeeder().regime(prefillPoint(2, 8, 16)), "real_prefix");
  assert.is(new RealPrefixSeeder().regime(prefillPoint(2, 8, 0)), "not_applicable");
});

test.run();
